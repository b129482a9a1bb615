//! Result shapes observed: for a tool that declares no output schema, the shape of what its
//! calls returned (types and field names, never a value), per tenant, shown to the model as
//! `-> {id: int, title: str, labels: list[str]} (observed)` in the tool's signature line and
//! stub once seen (`stubs.py`).
//!
//! The rule, in one place: a shape is a JSON Schema made only of `type`, `properties`,
//! `required`, `items`, `additionalProperties` and `anyOf`. Strings, numbers and booleans
//! become their type; an object's keys become property names only when they read as names
//! (an identifier-like key of at most 40 characters), else the object is a map
//! (`dict[str, ...]`) whose keys are not kept: a result keyed by e-mail addresses or dates
//! shows none of them. Each tool's shape merges the first [`SAMPLES`] results (a key missing
//! from one is optional), then stays.
//!
//! Bounded: results over [`MAX_OBSERVED_BYTES`] are not looked at; a shape is at most
//! [`DEPTH`] levels deep, [`MAX_PROPERTIES`] properties an object (more: a map), the first
//! [`MAX_ITEMS`] items of an array, [`MAX_VARIANTS`] types a union (more: any); a tenant keeps
//! [`MAX_PER_TENANT`] tools' shapes (the oldest go first), all tenants [`MAX_TOTAL`].

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::{Map, Value, json};

/// Results merged into a tool's shape before it stays as it is.
pub const SAMPLES: u32 = 5;
/// Larger results are not parsed for their shape (the result still reaches the program).
pub const MAX_OBSERVED_BYTES: usize = 256 * 1024;
/// Levels of nesting kept; deeper objects and arrays are plain `dict` and `list`.
pub const DEPTH: usize = 4;
/// Properties an object may have and still be shown with its field names.
pub const MAX_PROPERTIES: usize = 32;
/// Items of an array whose shapes are merged into its item shape.
pub const MAX_ITEMS: usize = 16;
/// Types a union may have before it is shown as any.
pub const MAX_VARIANTS: usize = 4;
/// Tools' shapes one tenant keeps.
pub const MAX_PER_TENANT: usize = 512;
/// Tools' shapes all tenants keep together.
pub const MAX_TOTAL: usize = 16_384;

/// Shapes by tenant and tool label (`namespace.name`). Executions without a tenant share "".
#[derive(Default)]
pub(crate) struct ObservedShapes {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    tenants: HashMap<String, Tenant>,
    total: usize,
    /// Changes so far, of all tenants: a tenant's version is the number of its last change,
    /// so that a tenant dropped when it had no shapes left and seen again never repeats a
    /// version a rendering was made with.
    changes: u64,
}

#[derive(Default)]
struct Tenant {
    shapes: HashMap<String, Observed>,
    /// Labels, oldest first, for eviction.
    order: VecDeque<String>,
    /// Changes whenever a shape changes, never back: what a rendering of the tenant's tools
    /// depends on.
    version: u64,
}

struct Observed {
    shape: Value,
    samples: u32,
}

impl ObservedShapes {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a result of `label` for `tenant` would still change anything.
    pub(crate) fn wants(&self, tenant: &str, label: &str, size: usize) -> bool {
        size <= MAX_OBSERVED_BYTES
            && self.state().tenants.get(tenant).and_then(|t| t.shapes.get(label)).is_none_or(|o| o.samples < SAMPLES)
    }

    /// Merges the shape of `value`, a result of `label`, into what `tenant` has seen.
    pub(crate) fn record(&self, tenant: &str, label: &str, value: &Value) {
        let shape = shape_of(value, DEPTH);
        let mut guard = self.state();
        let state = &mut *guard;
        if !state.tenants.contains_key(tenant) || !state.tenants[tenant].shapes.contains_key(label) {
            if state.total >= MAX_TOTAL {
                state.evict_from_largest();
            }
            let entry = state.tenants.entry(tenant.to_string()).or_default();
            if entry.shapes.len() >= MAX_PER_TENANT
                && let Some(old) = entry.order.pop_front()
            {
                entry.shapes.remove(&old);
                state.total -= 1;
            }
            entry.order.push_back(label.to_string());
            entry.shapes.insert(label.to_string(), Observed { shape, samples: 1 });
            state.changes += 1;
            entry.version = state.changes;
            state.total += 1;
            return;
        }
        let entry = state.tenants.get_mut(tenant).expect("checked above");
        let observed = entry.shapes.get_mut(label).expect("checked above");
        if observed.samples >= SAMPLES {
            return;
        }
        observed.samples += 1;
        let merged = merge(&observed.shape, &shape);
        if merged != observed.shape {
            observed.shape = merged;
            state.changes += 1;
            entry.version = state.changes;
        }
    }

    /// The shape `tenant` has seen `label` return, if any.
    pub(crate) fn shape(&self, tenant: &str, label: &str) -> Option<Value> {
        self.state().tenants.get(tenant).and_then(|t| t.shapes.get(label)).map(|o| o.shape.clone())
    }

    /// Changes with every change of `tenant`'s shapes.
    pub(crate) fn version(&self, tenant: &str) -> u64 {
        self.state().tenants.get(tenant).map_or(0, |t| t.version)
    }
}

impl State {
    fn evict_from_largest(&mut self) {
        let Some(tenant) = self.tenants.iter().max_by_key(|(_, t)| t.shapes.len()).map(|(k, _)| k.clone()) else {
            return;
        };
        let entry = self.tenants.get_mut(&tenant).expect("just found");
        if let Some(old) = entry.order.pop_front() {
            entry.shapes.remove(&old);
            self.changes += 1;
            entry.version = self.changes;
            self.total -= 1;
        }
        if entry.shapes.is_empty() {
            self.tenants.remove(&tenant);
        }
    }
}

/// Whether an object key reads as a field name rather than as data (an id, an address, a date).
fn is_name(key: &str) -> bool {
    let mut chars = key.chars();
    let starts = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let digits = key.chars().filter(char::is_ascii_digit).count();
    starts
        && key.len() <= 40
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        // `a3f29c...`: hex ids and the like.
        && !(key.len() >= 16 && digits >= 4)
}

/// The shape of one value, `depth` levels deep.
pub(crate) fn shape_of(value: &Value, depth: usize) -> Value {
    match value {
        Value::Null => json!({"type": "null"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(n) if n.is_f64() => json!({"type": "number"}),
        Value::Number(_) => json!({"type": "integer"}),
        Value::String(_) => json!({"type": "string"}),
        Value::Array(_) if depth == 0 => json!({"type": "array"}),
        Value::Array(items) => {
            let items = items.iter().take(MAX_ITEMS).map(|v| shape_of(v, depth - 1)).reduce(|a, b| merge(&a, &b));
            match items {
                Some(items) => json!({"type": "array", "items": items}),
                None => json!({"type": "array"}),
            }
        }
        Value::Object(_) if depth == 0 => json!({"type": "object"}),
        Value::Object(fields) => {
            if fields.len() > MAX_PROPERTIES || !fields.keys().all(|k| is_name(k)) {
                let values =
                    fields.values().take(MAX_ITEMS).map(|v| shape_of(v, depth - 1)).reduce(|a, b| merge(&a, &b));
                return match values {
                    Some(v) => json!({"type": "object", "additionalProperties": v}),
                    None => json!({"type": "object"}),
                };
            }
            let properties: Map<String, Value> =
                fields.iter().map(|(k, v)| (k.clone(), shape_of(v, depth - 1))).collect();
            let required: Vec<Value> = fields.keys().map(|k| Value::String(k.clone())).collect();
            json!({"type": "object", "properties": properties, "required": required})
        }
    }
}

fn kind(shape: &Value) -> Option<&str> {
    shape.get("type").and_then(Value::as_str)
}

fn variants(shape: &Value) -> Vec<Value> {
    match shape.get("anyOf").and_then(Value::as_array) {
        Some(list) => list.clone(),
        None => vec![shape.clone()],
    }
}

/// One shape for two: objects' properties joined (a key one lacks is optional), arrays' items
/// merged, `integer` and `number` a `number`, other differences a union.
pub(crate) fn merge(a: &Value, b: &Value) -> Value {
    if a == b {
        return a.clone();
    }
    // `{}` is any (a union grown past MAX_VARIANTS): it stays any.
    if a.as_object().is_some_and(Map::is_empty) || b.as_object().is_some_and(Map::is_empty) {
        return json!({});
    }
    if a.get("anyOf").is_some() || b.get("anyOf").is_some() {
        let mut out = variants(a);
        for v in variants(b) {
            add_variant(&mut out, v);
        }
        return union(out);
    }
    match (kind(a), kind(b)) {
        (Some("integer"), Some("number")) | (Some("number"), Some("integer")) => json!({"type": "number"}),
        (Some("array"), Some("array")) => match (a.get("items"), b.get("items")) {
            (Some(x), Some(y)) => json!({"type": "array", "items": merge(x, y)}),
            (Some(x), None) | (None, Some(x)) => json!({"type": "array", "items": x}),
            (None, None) => json!({"type": "array"}),
        },
        (Some("object"), Some("object")) => merge_objects(a, b),
        _ => union(vec![a.clone(), b.clone()]),
    }
}

fn add_variant(out: &mut Vec<Value>, v: Value) {
    if let Some(same) = out.iter_mut().find(|o| kind(o) == kind(&v) || (is_number(o) && is_number(&v))) {
        *same = merge(same, &v);
    } else {
        out.push(v);
    }
}

fn is_number(shape: &Value) -> bool {
    matches!(kind(shape), Some("integer" | "number"))
}

fn union(list: Vec<Value>) -> Value {
    match list.len() {
        1 => list.into_iter().next().expect("one"),
        n if n > MAX_VARIANTS => json!({}),
        _ => json!({"anyOf": list}),
    }
}

fn merge_objects(a: &Value, b: &Value) -> Value {
    let (pa, pb) = (a.get("properties").and_then(Value::as_object), b.get("properties").and_then(Value::as_object));
    let (Some(pa), Some(pb)) = (pa, pb) else {
        // A map and an object, or two maps: a map of their values' shapes.
        let values = [a, b]
            .iter()
            .flat_map(|s| match (s.get("additionalProperties"), s.get("properties").and_then(Value::as_object)) {
                (Some(v), _) => vec![v.clone()],
                (None, Some(p)) => p.values().cloned().collect(),
                (None, None) => vec![],
            })
            .reduce(|x, y| merge(&x, &y));
        return match values {
            Some(v) => json!({"type": "object", "additionalProperties": v}),
            None => json!({"type": "object"}),
        };
    };
    let mut properties = pa.clone();
    for (k, v) in pb {
        let merged = match pa.get(k) {
            Some(old) => merge(old, v),
            None => v.clone(),
        };
        properties.insert(k.clone(), merged);
    }
    if properties.len() > MAX_PROPERTIES {
        return json!({"type": "object"});
    }
    let required = |s: &Value| -> Vec<String> {
        s.get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default()
    };
    let rb = required(b);
    let both: Vec<Value> = required(a).into_iter().filter(|k| rb.contains(k)).map(Value::String).collect();
    json!({"type": "object", "properties": properties, "required": both})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(v: Value) -> Value {
        shape_of(&v, DEPTH)
    }

    #[test]
    fn an_object_keeps_field_names_and_types_never_values() {
        let s =
            shape(json!({"id": 7, "title": "secret plans", "score": 0.5, "labels": ["x"], "done": false, "by": null}));
        let text = s.to_string();
        assert!(!text.contains("secret") && !text.contains("\"x\"") && !text.contains('7'), "{text}");
        assert_eq!(s["properties"]["id"], json!({"type": "integer"}));
        assert_eq!(s["properties"]["labels"], json!({"type": "array", "items": {"type": "string"}}));
        assert_eq!(s["required"].as_array().unwrap().len(), 6);
    }

    #[test]
    fn keys_that_are_data_are_not_kept() {
        for keys in [
            json!({"alice@example.com": 1, "bob@example.com": 2}),
            json!({"2026-11-27": {"n": 1}}),
            json!({"a3f29c4e1b0d9e7f6a5b": true}),
        ] {
            let s = shape(keys.clone());
            let text = s.to_string();
            assert!(s.get("properties").is_none() && s.get("additionalProperties").is_some(), "{text}");
            for k in keys.as_object().unwrap().keys() {
                assert!(!text.contains(k.as_str()), "{text}");
            }
        }
    }

    #[test]
    fn results_merge_a_missing_key_optional_and_differing_types_a_union() {
        let a = shape(json!({"id": 1, "body": "x", "n": 1}));
        let b = shape(json!({"id": 2, "n": 1.5, "body": null}));
        let c = shape(json!({"id": 3, "n": 2}));
        let m = merge(&merge(&a, &b), &c);
        assert_eq!(m["required"], json!(["id", "n"]));
        assert_eq!(m["properties"]["n"], json!({"type": "number"}));
        assert_eq!(m["properties"]["body"], json!({"anyOf": [{"type": "string"}, {"type": "null"}]}));
        // Items of a list of objects merge the same way.
        let list = shape(json!([{"id": 1, "tag": "a"}, {"id": 2}]));
        assert_eq!(list["items"]["required"], json!(["id"]));
    }

    #[test]
    fn shapes_are_bounded() {
        let mut deep = json!(1);
        for _ in 0..50 {
            deep = json!({"a": deep});
        }
        assert_eq!(shape(deep).to_string().matches("properties").count(), DEPTH);
        let wide: Map<String, Value> = (0..100).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(shape(Value::Object(wide)), json!({"type": "object", "additionalProperties": {"type": "integer"}}));
        let mixed = json!([1, "a", true, null, [1], {"a": 1}]);
        assert_eq!(shape(mixed), json!({"type": "array", "items": {}}));
    }

    #[test]
    fn a_tenant_sees_only_its_own_and_a_shape_stays_after_its_samples() {
        let store = ObservedShapes::default();
        store.record("acme", "gh.get_issue", &json!({"id": 1}));
        assert!(store.shape("other", "gh.get_issue").is_none());
        let v = store.version("acme");
        for _ in 1..SAMPLES {
            assert!(store.wants("acme", "gh.get_issue", 10));
            store.record("acme", "gh.get_issue", &json!({"id": 1}));
        }
        assert_eq!(store.version("acme"), v, "the same shape changes nothing");
        assert!(!store.wants("acme", "gh.get_issue", 10), "the shape stays after {SAMPLES} results");
        assert!(!store.wants("acme", "gh.other", MAX_OBSERVED_BYTES + 1));
    }

    #[test]
    fn a_tenant_keeps_at_most_its_share_oldest_first() {
        let store = ObservedShapes::default();
        for i in 0..MAX_PER_TENANT + 3 {
            store.record("acme", &format!("t{i}"), &json!(1));
        }
        assert!(store.shape("acme", "t0").is_none() && store.shape("acme", "t2").is_none());
        assert!(store.shape("acme", "t3").is_some());
        assert_eq!(store.state().total, MAX_PER_TENANT);
    }

    #[test]
    fn a_tenant_dropped_and_seen_again_never_repeats_a_version() {
        let store = ObservedShapes::default();
        let tenants: Vec<String> = (0..MAX_TOTAL).map(|i| format!("t{i}")).collect();
        for t in &tenants {
            store.record(t, "x.y", &json!(1));
        }
        let before: Vec<u64> = tenants.iter().map(|t| store.version(t)).collect();
        // One more shape evicts one from the largest tenant, here one of one shape: it goes.
        store.record("newcomer", "x.y", &json!(1));
        let gone = tenants.iter().position(|t| store.shape(t, "x.y").is_none()).expect("one was evicted");
        assert_eq!(store.version(&tenants[gone]), 0);
        store.record(&tenants[gone], "x.y", &json!(1));
        assert!(store.version(&tenants[gone]) > before[gone], "a rendering made before is stale");
    }
}
