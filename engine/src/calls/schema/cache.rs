//! The one cache of tools' schemas, from a schema's text on the wire to its compiled
//! validator. **Every entry is keyed by the tenant and what it was made from**: one tenant
//! cannot tell from the timing which schemas another sent or uses (a cache shared across
//! tenants let one time whether another had sent a schema lately: 24.2 against 26.5 ms, a
//! held-out run). Three kinds of entry, each bounded:
//!
//! - **Parsed** ([`SchemaCache::parse`]): a schema's JSON text → its value. A client sends a
//!   session's tools with every run (the Python client does), and parsing 102 MCP tools'
//!   schemas was most of the server's part of a session `pass` with them (1.3 against 0.3 ms
//!   for one tool, `phases --grpc`). At most [`TEXT_KEPT`] bytes of keys; it starts over when
//!   full, and a text larger than a sixteenth of that is parsed every time.
//! - **Verdicts** ([`SchemaCache::problem`]): whether one tool's schema can be used (compiles,
//!   and its checks are bounded), by its namespace, name and parameters: the MCP front end
//!   asks for every downstream tool at every listing. At most [`VERDICTS`]; starts over when
//!   full.
//! - **Compiled** (`compiled`): a tool set's validators. Compiling even one two-property
//!   schema took 30–60 µs back to back and 60–120 µs after a quiet spell (`phases`,
//!   2026-11-25): the largest host-side cost of a fresh `pass`; 102 real MCP tools take
//!   2.7 ms. A tenant's programs mostly run against the same tools, so the validators of the
//!   last [`ENTRIES`] tool sets are kept, the least recently used going first, and at most
//!   [`VALUES`] JSON values of schemas in all. A tool set larger than that is compiled each
//!   time; one whose schemas are refused is never kept.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::{Schemas, check_tool_schema};
use crate::api::error::Result;
use crate::api::request::ToolDef;

/// Bytes of schema text (with the tenant) kept parsed.
pub const TEXT_KEPT: usize = 2 << 20;

/// Single tools' verdicts kept.
pub const VERDICTS: usize = 8192;

/// Tool sets kept.
const ENTRIES: usize = 64;

/// JSON values of schemas kept, all sets together (about 25 sets the size of 102 real MCP
/// tools'). Compiled validators take a few hundred bytes per value.
const VALUES: usize = 65_536;

/// Tools' schemas parsed, checked and compiled, by tenant (see the module's header).
#[derive(Default)]
pub struct SchemaCache {
    /// Compiled tool sets, most recently used first.
    entries: Mutex<VecDeque<Entry>>,
    parsed: Mutex<Parsed>,
    verdicts: Mutex<HashMap<ToolKey, Verdict>>,
}

/// Tenant, a NUL, and the text → the parsed schema; and the bytes of those keys.
#[derive(Default)]
struct Parsed {
    by_text: HashMap<Box<str>, Arc<Value>, foldhash::quality::RandomState>,
    bytes: usize,
}

/// A tool as a verdict depends on it: tenant, namespace, name.
type ToolKey = (Option<String>, Option<String>, String);

/// The parameters a verdict was reached for, and the verdict (`None`: usable).
type Verdict = (Option<Arc<Value>>, Option<String>);

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
    /// The schema `text` (JSON) as `tenant` sent it, parsed.
    pub fn parse(&self, tenant: &str, text: &str) -> serde_json::Result<Arc<Value>> {
        let key = format!("{tenant}\0{text}");
        if let Some(parsed) = self.parsed.lock().unwrap_or_else(|e| e.into_inner()).by_text.get(key.as_str()) {
            return Ok(parsed.clone());
        }
        let value: Arc<Value> = Arc::new(serde_json::from_str(text)?);
        if key.len() <= TEXT_KEPT / 16 {
            let mut kept = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
            if kept.bytes + key.len() > TEXT_KEPT {
                kept.by_text.clear();
                kept.bytes = 0;
            }
            if !kept.by_text.contains_key(key.as_str()) {
                kept.bytes += key.len();
                kept.by_text.insert(key.into(), value.clone());
            }
        }
        Ok(value)
    }

    /// Why `tool`'s parameters cannot be its input schema for `tenant` (see
    /// [`check_tool_schema`]), if they cannot.
    pub fn problem(&self, tenant: Option<&str>, tool: &ToolDef) -> Option<String> {
        let key = (tenant.map(str::to_string), tool.namespace.clone(), tool.name.clone());
        let same = |kept: &Option<Arc<Value>>| match (kept, &tool.parameters) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            (None, None) => true,
            _ => false,
        };
        if let Some((parameters, verdict)) = self.verdicts.lock().unwrap_or_else(|e| e.into_inner()).get(&key)
            && same(parameters)
        {
            return verdict.clone();
        }
        let verdict = check_tool_schema(tool).err().map(|e| e.message().to_string());
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|e| e.into_inner());
        if verdicts.len() >= VERDICTS {
            verdicts.clear();
        }
        verdicts.insert(key, (tool.parameters.clone(), verdict.clone()));
        verdict
    }

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

    /// Tool sets kept compiled now.
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

    #[test]
    fn parsed_texts_and_verdicts_are_kept_per_tenant_and_follow_the_schema() {
        let cache = SchemaCache::default();
        let text = r#"{"type": "object"}"#;
        let a = cache.parse("a", text).unwrap();
        assert!(Arc::ptr_eq(&a, &cache.parse("a", text).unwrap()), "kept");
        assert!(!Arc::ptr_eq(&a, &cache.parse("b", text).unwrap()), "another tenant's is its own");
        assert!(cache.parse("a", "{").is_err());
        // One too large to keep is parsed each time; many others never pass the bound.
        let large = format!(r#"{{"description": "{}"}}"#, "x".repeat(TEXT_KEPT / 16));
        assert!(!Arc::ptr_eq(&cache.parse("a", &large).unwrap(), &cache.parse("a", &large).unwrap()));
        let filler = "y".repeat(TEXT_KEPT / 64);
        for i in 0..200 {
            cache.parse("a", &format!(r#"{{"description": "{i}{filler}"}}"#)).unwrap();
            assert!(cache.parsed.lock().unwrap().bytes <= TEXT_KEPT);
        }

        let good = tool("add", "a");
        assert_eq!(cache.problem(None, &good), None);
        // The same tool with a schema changed to one that cannot be used: decided again.
        let bad = ToolDef::new("add").with_parameters(serde_json::json!(3));
        assert!(cache.problem(None, &bad).is_some_and(|why| why.contains("JSON Schema object")));
        assert_eq!(cache.problem(Some("t"), &good), None);
    }

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
