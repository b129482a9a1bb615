//! The tool lists a live session's instance holds. Every program of a session is given its
//! tools; when they are the same as the previous program's (definitions, and the result
//! shapes shown for them), they are not checked again, and the instance, which holds them,
//! is not sent them again (`execute`'s `tools` is `none` in the WIT). With 102 MCP tools,
//! copying, making, sending and comparing them was 1.8 of a session `pass`'s 1.9 ms (`phases
//! --session` with the five toolsets).
//!
//! Two halves: the session's side keeps a fingerprint of its last program's tools
//! ([`LastTools`], [`fingerprint`]) and numbers each new list; the driver sends an instance a
//! numbered list only if it does not hold that number ([`GuestTools`], `HostState::tools_held`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::api::request::ToolDef;
use crate::calls::observed::ObservedShapes;
use crate::calls::schema::Schemas;
use crate::instance::bindings;

/// A program's tools as the guest takes them.
pub(crate) enum GuestTools {
    /// Sent to the instance (a fresh one holds none).
    Sent(Vec<bindings::ToolDef>),
    /// List number `list` of a live session, made only if its instance does not hold it.
    Numbered { list: u64, make: Box<dyn Fn() -> Vec<bindings::ToolDef> + Send + Sync> },
}

impl GuestTools {
    /// What to send an instance that holds list `held` (none when it is this one), and the
    /// list it holds once it took them.
    pub(crate) fn for_instance(&self, held: u64) -> (Option<std::borrow::Cow<'_, [bindings::ToolDef]>>, u64) {
        match self {
            GuestTools::Sent(defs) => (Some(defs.into()), 0),
            GuestTools::Numbered { list, .. } if *list == held => (None, held),
            GuestTools::Numbered { list, make } => (Some(make().into()), *list),
        }
    }
}

/// A live session's last tools, by fingerprint: nothing of the definitions is kept.
#[derive(Default)]
pub(crate) struct LastTools(Mutex<Option<Kept>>);

struct Kept {
    fingerprint: u64,
    /// Their validators while anything still holds them (the engine's cache, mostly).
    schemas: Weak<Schemas>,
    list: u64,
}

impl LastTools {
    /// The validators and list number of the last program's tools, if `fingerprint` is theirs.
    pub(crate) fn same(&self, fingerprint: u64) -> Option<(Arc<Schemas>, u64)> {
        let kept = self.0.lock().unwrap();
        let kept = kept.as_ref().filter(|kept| kept.fingerprint == fingerprint)?;
        Some((kept.schemas.upgrade()?, kept.list))
    }

    /// Keeps the tools of the program about to run as the last; their list number, never 0
    /// (what an instance that holds none has).
    pub(crate) fn keep(&self, fingerprint: u64, schemas: &Arc<Schemas>) -> u64 {
        static LISTS: AtomicU64 = AtomicU64::new(1);
        let list = LISTS.fetch_add(1, Ordering::Relaxed);
        *self.0.lock().unwrap() = Some(Kept { fingerprint, schemas: Arc::downgrade(schemas), list });
        list
    }
}

/// The fingerprint of a tool list shown with result shapes of version `shapes`: a hash with a
/// key of this process's. Objects are hashed in their keys' order (serde_json's own `Hash`
/// sorts them, 5× the time here): the same definitions come in the same order, and others only
/// miss, which costs a resend.
pub(crate) fn fingerprint(tools: &[ToolDef], shapes: u64) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    fn value(v: &serde_json::Value, h: &mut impl Hasher) {
        use serde_json::Value;
        match v {
            Value::Null => h.write_u8(0),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => (2u8, n).hash(h),
            Value::String(s) => (3u8, s).hash(h),
            Value::Array(items) => {
                (4u8, items.len()).hash(h);
                items.iter().for_each(|item| value(item, h));
            }
            Value::Object(map) => {
                (5u8, map.len()).hash(h);
                for (k, v) in map {
                    k.hash(h);
                    value(v, h);
                }
            }
        }
    }
    fn schema(v: &Option<Arc<serde_json::Value>>, h: &mut impl Hasher) {
        match v {
            None => h.write_u8(0),
            Some(v) => value(v, h),
        }
    }
    static KEY: std::sync::OnceLock<foldhash::quality::RandomState> = std::sync::OnceLock::new();
    let mut h = KEY.get_or_init(Default::default).build_hasher();
    (shapes, tools.len()).hash(&mut h);
    for t in tools {
        (&t.name, &t.description, &t.namespace, t.requires_approval).hash(&mut h);
        schema(&t.parameters, &mut h);
        schema(&t.returns, &mut h);
    }
    h.finish()
}

/// `tools` as the guest takes them, each with what it returns: declared, or the shape its
/// results had for `tenant` when `observed` keeps them.
pub(crate) fn wit_tools(
    tools: &[ToolDef],
    observed: Option<&ObservedShapes>,
    tenant: Option<&str>,
) -> Vec<bindings::ToolDef> {
    tools
        .iter()
        .map(|t| {
            let namespace = t.namespace.clone().unwrap_or_default();
            let (returns, observed) = match (&t.returns, observed) {
                (Some(declared), _) => (declared.to_string(), false),
                (None, Some(shapes)) => {
                    let label = crate::api::request::label(&namespace, &t.name);
                    shapes
                        .shape(tenant.unwrap_or_default(), &label)
                        .map_or((String::new(), false), |s| (s.to_string(), true))
                }
                (None, None) => (String::new(), false),
            };
            bindings::ToolDef {
                name: t.name.clone(),
                description: crate::calls::approval::guest_description(t),
                parameters: crate::calls::approval::guest_parameters(t).map(|p| p.to_string()).unwrap_or_default(),
                namespace,
                returns,
                observed,
            }
        })
        .collect()
}
