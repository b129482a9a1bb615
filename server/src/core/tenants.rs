//! Per-tenant admission: concurrent and paused executions, and idempotency keys.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ptc_engine::Control;

/// Per-tenant caps: a policy, off unless set (then only the server's own limits apply).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct TenantLimits {
    /// Executions alive at once (running or paused) per tenant.
    pub max_concurrent: Option<usize>,
    /// Executions paused waiting for tool results per tenant; a new one is refused while a
    /// tenant has this many.
    pub max_paused: Option<usize>,
    /// HTTP requests in progress per tenant (each holds one of the server's connections: a
    /// run, an MCP stream); more get 429. `ptc-engine serve` sets a quarter of
    /// `--http-max-connections` when API keys are set.
    pub max_requests: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    TooManyExecutions(String),
    TooManyPaused(String),
    DuplicateRequest(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::TooManyExecutions(m) | Refusal::TooManyPaused(m) | Refusal::DuplicateRequest(m) => m,
        }
    }
}

#[derive(Default)]
struct Tenant {
    executions: HashMap<u64, Option<Control>>,
    request_ids: HashMap<String, u64>,
}

pub struct Tenants {
    limits: TenantLimits,
    state: Mutex<HashMap<String, Tenant>>,
    next: AtomicU64,
}

/// A tenant's slot for one execution; dropping it frees the slot and the request id.
pub struct Admission {
    tenants: Arc<Tenants>,
    pub tenant: String,
    slot: u64,
    request_id: Option<String>,
}

impl Tenants {
    pub fn new(limits: TenantLimits) -> Arc<Self> {
        Arc::new(Tenants { limits, state: Mutex::new(HashMap::new()), next: AtomicU64::new(1) })
    }

    /// Admits one more execution of `tenant`, which has `paused` executions parked now
    /// (`Engine::paused_executions_of`: a count, where scanning the tenant's executions cost
    /// each admission a walk of all of them, 10.7% of the server's CPU at 37,000 paused).
    pub fn admit(
        self: &Arc<Self>,
        tenant: &str,
        request_id: Option<&str>,
        paused: usize,
    ) -> Result<Admission, Refusal> {
        let mut state = self.state.lock().unwrap();
        let t = state.entry(tenant.to_string()).or_default();
        if let Some(max) = self.limits.max_concurrent
            && t.executions.len() >= max
        {
            return Err(Refusal::TooManyExecutions(format!(
                "tenant {tenant:?} already has {} executions (limit {max}); wait for some to finish",
                t.executions.len(),
            )));
        }
        if let Some(max) = self.limits.max_paused
            && paused >= max
        {
            return Err(Refusal::TooManyPaused(format!(
                "tenant {tenant:?} already has {paused} paused executions (limit {max}); answer or cancel some first"
            )));
        }
        let request_id = request_id.filter(|r| !r.is_empty()).map(str::to_owned);
        if let Some(rid) = &request_id
            && t.request_ids.contains_key(rid)
        {
            return Err(Refusal::DuplicateRequest(format!("request id {rid:?} is already running")));
        }
        let slot = self.next.fetch_add(1, Ordering::Relaxed);
        t.executions.insert(slot, None);
        if let Some(rid) = &request_id {
            t.request_ids.insert(rid.clone(), slot);
        }
        Ok(Admission { tenants: self.clone(), tenant: tenant.to_string(), slot, request_id })
    }

    /// The execution a tenant started with `request_id`, if it is still alive.
    pub fn by_request_id(&self, tenant: &str, request_id: &str) -> Option<Control> {
        let state = self.state.lock().unwrap();
        let t = state.get(tenant)?;
        t.executions.get(t.request_ids.get(request_id)?)?.clone()
    }

    pub fn active(&self, tenant: &str) -> usize {
        self.state.lock().unwrap().get(tenant).map_or(0, |t| t.executions.len())
    }
}

impl Admission {
    pub fn attach(&self, control: Control) {
        let mut state = self.tenants.state.lock().unwrap();
        if let Some(slot) = state.get_mut(&self.tenant).and_then(|t| t.executions.get_mut(&self.slot)) {
            *slot = Some(control);
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut state = self.tenants.state.lock().unwrap();
        if let Some(t) = state.get_mut(&self.tenant) {
            t.executions.remove(&self.slot);
            if let Some(rid) = &self.request_id {
                t.request_ids.remove(rid);
            }
            if t.executions.is_empty() {
                state.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_request_ids() {
        let tenants = Tenants::new(TenantLimits { max_concurrent: Some(2), max_paused: Some(10), max_requests: None });
        let a = tenants.admit("t", Some("r1"), 0).unwrap();
        assert!(matches!(tenants.admit("t", Some("r1"), 0), Err(Refusal::DuplicateRequest(_))));
        let _b = tenants.admit("t", None, 0).unwrap();
        assert!(matches!(tenants.admit("t", None, 0), Err(Refusal::TooManyExecutions(_))));
        assert!(tenants.admit("other", None, 0).is_ok(), "limits are per tenant");
        assert!(matches!(tenants.admit("third", None, 10), Err(Refusal::TooManyPaused(_))));
        drop(a);
        assert_eq!(tenants.active("t"), 1);
        assert!(tenants.admit("t", Some("r1"), 0).is_ok());
    }
}
