//! Compiled input schemas kept between executions. Compiling even one two-property schema
//! took 30–60 µs back to back and 60–120 µs after a quiet spell (`phases`, 2026-11-25): the
//! largest host-side cost of a fresh `pass`; 102 real MCP tools take 2.7 ms. A tenant's
//! programs mostly run against the same tools, so the engine keeps the validators of the
//! last [`ENTRIES`] tool sets it compiled, each for one tenant (one tenant cannot tell from
//! the timing which tools another uses), the least recently used going first, and at most
//! [`VALUES`] JSON values of schemas in all. A tool set larger than that is compiled each
//! time; one whose schemas are refused is never kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::Schemas;
use crate::error::Result;
use crate::request::ToolDef;

/// Tool sets kept.
const ENTRIES: usize = 64;

/// JSON values of schemas kept, all sets together (about 25 sets the size of 102 real MCP
/// tools'). Compiled validators take a few hundred bytes per value.
const VALUES: usize = 65_536;

#[derive(Default)]
pub(crate) struct SchemaCache {
    /// Most recently used first.
    entries: Mutex<VecDeque<Entry>>,
}

struct Entry {
    tenant: Option<String>,
    /// What the validators depend on, tool by tool: namespace, name, parameters.
    tools: Vec<(Option<String>, String, Option<std::sync::Arc<serde_json::Value>>)>,
    values: usize,
    schemas: Arc<Schemas>,
}

impl Entry {
    fn is_for(&self, tenant: Option<&str>, tools: &[ToolDef]) -> bool {
        self.tenant.as_deref() == tenant
            && self.tools.len() == tools.len()
            && self.tools.iter().zip(tools).all(|((namespace, name, parameters), tool)| {
                *name == tool.name && *namespace == tool.namespace && *parameters == tool.parameters
            })
    }
}

impl SchemaCache {
    /// The compiled input schemas of `tools` for `tenant`: kept ones, or compiled now (and
    /// kept).
    pub(crate) async fn compiled(&self, tenant: Option<&str>, tools: &[ToolDef]) -> Result<Arc<Schemas>> {
        if let Some(kept) = self.find(tenant, tools) {
            return Ok(kept);
        }
        let schemas = Schemas::compile_shared(tools).await?;
        self.keep(tenant, tools, &schemas);
        Ok(schemas)
    }

    fn find(&self, tenant: Option<&str>, tools: &[ToolDef]) -> Option<Arc<Schemas>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let i = entries.iter().position(|e| e.is_for(tenant, tools))?;
        let entry = entries.remove(i)?;
        let schemas = entry.schemas.clone();
        entries.push_front(entry);
        Some(schemas)
    }

    fn keep(&self, tenant: Option<&str>, tools: &[ToolDef], schemas: &Arc<Schemas>) {
        let values = tools.len() + tools.iter().filter_map(|t| t.parameters.as_deref()).map(count).sum::<usize>();
        if values > VALUES {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        // Another execution may have compiled the same meanwhile.
        if entries.iter().any(|e| e.is_for(tenant, tools)) {
            return;
        }
        let tools = tools.iter().map(|t| (t.namespace.clone(), t.name.clone(), t.parameters.clone())).collect();
        entries.push_front(Entry { tenant: tenant.map(str::to_string), tools, values, schemas: schemas.clone() });
        let mut total: usize = entries.iter().map(|e| e.values).sum();
        while entries.len() > ENTRIES || total > VALUES {
            let Some(dropped) = entries.pop_back() else { break };
            total -= dropped.values;
        }
    }

    /// Tool sets kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

/// JSON values in `value`, itself included.
fn count(value: &serde_json::Value) -> usize {
    1 + match value {
        serde_json::Value::Array(items) => items.iter().map(count).sum(),
        serde_json::Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, property: &str) -> ToolDef {
        ToolDef::new(name).with_parameters(serde_json::json!({
            "type": "object", "properties": {property: {"type": "integer"}}, "required": [property]
        }))
    }

    #[tokio::test]
    async fn a_tool_set_is_compiled_once_per_tenant_and_the_least_recently_used_goes_first() {
        let cache = SchemaCache::default();
        let tools = vec![tool("add", "a")];
        let first = cache.compiled(Some("t1"), &tools).await.unwrap();
        assert!(Arc::ptr_eq(&first, &cache.compiled(Some("t1"), &tools).await.unwrap()), "kept");
        // Another tenant, or a schema that differs in one property, is compiled anew.
        let other = cache.compiled(Some("t2"), &tools).await.unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        let changed = cache.compiled(Some("t1"), &[tool("add", "b")]).await.unwrap();
        assert!(changed.check("", "add", r#"{"a": 1}"#).is_err(), "the changed schema checks inputs");
        assert!(first.check("", "add", r#"{"a": 1}"#).is_ok());
        assert_eq!(cache.len(), 3);

        // Using `first` again keeps it past ENTRIES newer sets but one.
        for i in 0..ENTRIES - 1 {
            cache.compiled(Some("t3"), &[tool(&format!("t{i}"), "a")]).await.unwrap();
            cache.compiled(Some("t1"), &tools).await.unwrap();
        }
        assert_eq!(cache.len(), ENTRIES);
        assert!(Arc::ptr_eq(&first, &cache.compiled(Some("t1"), &tools).await.unwrap()));
        assert!(!Arc::ptr_eq(&other, &cache.compiled(Some("t2"), &tools).await.unwrap()), "t2's was dropped");

        // A refused schema is not kept; a set past VALUES is compiled, not kept.
        let refused = ToolDef::new("bad").with_parameters(serde_json::json!(3));
        assert!(cache.compiled(None, &[refused]).await.is_err());
        let wide: serde_json::Map<String, serde_json::Value> =
            (0..VALUES).map(|i| (format!("p{i}"), serde_json::json!({}))).collect();
        let wide = ToolDef::new("wide").with_parameters(serde_json::json!({"type": "object", "properties": wide}));
        let compiled = cache.compiled(None, std::slice::from_ref(&wide)).await.unwrap();
        assert!(!Arc::ptr_eq(&compiled, &cache.compiled(None, &[wide]).await.unwrap()));
        assert_eq!(cache.len(), ENTRIES);
    }
}
