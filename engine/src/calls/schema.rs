//! Tool input validation on the host, before a call leaves the sandbox.
//!
//! Schemas are compiled once per tool set and tenant (kept between executions: `cache.rs`), with remote `$ref` resolution off (the crate is
//! built without its HTTP/file resolvers), so a schema cannot make the host fetch anything.
//!
//! **Bounded.** A program controls the inputs it sends, and jsonschema cannot be stopped once
//! it validates: a 4 KB schema and a 400 KB input once took 27.7 s of host CPU per call (two of
//! them stalled every other tenant), and collecting every error of a 93 KB input grew the
//! server by 5 GiB. So each check first counts its cost (`cost.rs`): a call past
//! [`MAX_CHECK_STEPS`] is refused with a `ToolError` before jsonschema sees it; one past
//! [`INLINE_CHECK_STEPS`] (or an input past [`INLINE_CHECK_BYTES`]) is checked on the blocking
//! pool, not on an async worker, while its execution holds its tenant's run slot and its
//! deadline runs; only cheap checks collect several errors, the rest report the first one.
//! A schema that makes one value cost more than [`MAX_WIDEST`] subschema visits (`anyOf`s
//! through `$ref`s multiply) is refused when the tools are given.

mod cache;
mod cost;

use std::collections::HashMap;

use jsonschema::Validator;

use crate::api::error::{Error, Result};
use crate::api::request::ToolDef;
use crate::api::request::label;

pub use cache::SchemaCache;

/// The most steps (subschema visits) one input check may take. The costliest shape measured,
/// a pattern on each of 200 `anyOf` branches, took jsonschema 27 ms for 962,401 steps, and the
/// count 92 ms in a debug build (`measure_check_costs` below).
pub const MAX_CHECK_STEPS: u64 = 1_000_000;
/// Checks up to this many steps run where the call is made (an async worker): at most about
/// 0.2 ms counted and checked at the rates above.
pub const INLINE_CHECK_STEPS: u64 = 2_000;
/// Inputs larger than this are parsed and checked on the blocking pool whatever their cost.
pub const INLINE_CHECK_BYTES: usize = 64 * 1024;
/// The most subschemas one value can be checked against through a single subschema.
pub const MAX_WIDEST: u64 = 10_000;
/// Checks up to this many steps report up to five problems; costlier ones report the first
/// (collecting all of them allocates an error per failed branch).
const DETAILED_CHECK_STEPS: u64 = 20_000;
/// How much of each problem's message is kept: jsonschema's messages quote the value.
const MAX_PROBLEM_CHARS: usize = 300;

struct Compiled {
    validator: Validator,
    graph: cost::Graph,
}

pub(crate) struct Schemas {
    /// By (namespace or "", name): names are unique only within a namespace.
    validators: HashMap<(String, String), Option<Compiled>>,
}

/// Whether `tool`'s parameters can be used as its input schema: a JSON Schema object (or
/// boolean) that compiles and whose checks are bounded (see the module's docs). The MCP
/// front end uses it to set aside a downstream tool whose schema this server cannot check.
pub fn check_tool_schema(tool: &ToolDef) -> Result<()> {
    compile(tool).map(|_| ())
}

fn compile(tool: &ToolDef) -> Result<Option<Compiled>> {
    let schema = match &tool.parameters {
        None => return Ok(None),
        Some(schema) if schema.is_object() || schema.is_boolean() => schema,
        Some(_) => {
            return Err(Error::invalid(format!("tool {:?}: parameters must be a JSON Schema object", tool.name)));
        }
    };
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| Error::invalid(format!("tool {:?} has an invalid JSON Schema: {e}", tool.name)))?;
    let graph = cost::Graph::build(schema).map_err(|e| {
        Error::invalid(format!("tool {:?} has a JSON Schema too large to check inputs against: {e}", tool.name))
    })?;
    let widest = graph.widest(MAX_WIDEST);
    if widest > MAX_WIDEST {
        return Err(Error::invalid(format!(
            "tool {:?} has a JSON Schema too costly to check inputs against: one value can be checked against more \
             than {MAX_WIDEST} of its subschemas (anyOf/oneOf/allOf through $ref multiply); simplify the schema",
            tool.name
        )));
    }
    Ok(Some(Compiled { validator, graph }))
}

/// Tools whose schemas hold more JSON values than this together are compiled on the blocking
/// pool: compiling takes about a microsecond per value, and 256 tools of 256 KiB each fit in
/// a request.
const INLINE_COMPILE_VALUES: usize = 4096;

impl Schemas {
    /// [`Schemas::compile`], on the blocking pool when the schemas are large.
    pub(crate) async fn compile_shared(tools: &[ToolDef]) -> Result<std::sync::Arc<Self>> {
        let mut left = INLINE_COMPILE_VALUES;
        let small = tools.iter().filter_map(|t| t.parameters.as_ref()).all(|p| within(p, &mut left));
        if small {
            return Self::compile(tools).map(std::sync::Arc::new);
        }
        let tools = tools.to_vec();
        tokio::task::spawn_blocking(move || Self::compile(&tools).map(std::sync::Arc::new))
            .await
            .map_err(|e| Error::engine("compiling tool schemas", e))?
    }

    /// No tools.
    pub(crate) fn none() -> Self {
        Schemas { validators: HashMap::new() }
    }

    pub(crate) fn compile(tools: &[ToolDef]) -> Result<Self> {
        let mut validators = HashMap::with_capacity(tools.len());
        for tool in tools {
            validators.insert((tool.namespace.clone().unwrap_or_default(), tool.name.clone()), compile(tool)?);
        }
        Ok(Schemas { validators })
    }

    /// The check of `input` if it is cheap enough for an async worker (see the module's
    /// docs); `None`: run [`Schemas::check`] on the blocking pool.
    pub(crate) fn check_inline(
        &self,
        namespace: &str,
        name: &str,
        input: &str,
    ) -> Option<std::result::Result<(), String>> {
        if input.len() > INLINE_CHECK_BYTES {
            return None;
        }
        self.check_within(namespace, name, input, INLINE_CHECK_STEPS)
    }

    /// `Err(message)` for the program's `ToolError` when the call must not leave the sandbox.
    pub(crate) fn check(&self, namespace: &str, name: &str, input: &str) -> std::result::Result<(), String> {
        self.check_within(namespace, name, input, MAX_CHECK_STEPS).unwrap_or_else(|| {
            Err(format!(
                "the input of tool {:?} is too large to check against its schema (more than {MAX_CHECK_STEPS} checks); \
                 pass less data per call (split it over several calls)",
                label(namespace, name)
            ))
        })
    }

    /// The check, or `None` if it would take more than `budget` steps.
    fn check_within(
        &self,
        namespace: &str,
        name: &str,
        input: &str,
        budget: u64,
    ) -> Option<std::result::Result<(), String>> {
        let Some(compiled) = self.validators.get(&(namespace.to_string(), name.to_string())) else {
            return Some(Err(format!("unknown tool {:?}", label(namespace, name))));
        };
        let name = label(namespace, name);
        let value: serde_json::Value = match serde_json::from_str(input) {
            Ok(value) => value,
            Err(e) => return Some(Err(format!("input of {name:?} is not JSON: {e}"))),
        };
        let Some(Compiled { validator, graph }) = compiled else { return Some(Ok(())) };
        let steps = graph.cost(&value, budget)?;
        if validator.is_valid(&value) {
            return Some(Ok(()));
        }
        let problems: Vec<String> = if steps <= DETAILED_CHECK_STEPS {
            validator.iter_errors(&value).take(5).map(|e| problem(&e)).collect()
        } else {
            validator.validate(&value).err().iter().map(problem).collect()
        };
        Some(Err(format!("invalid input for tool {name:?}: {}", problems.join("; "))))
    }
}

/// Whether `value` holds at most `left` JSON values (counting them down from `left`).
fn within(value: &serde_json::Value, left: &mut usize) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        if *left == 0 {
            return false;
        }
        *left -= 1;
        match v {
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    true
}

/// One validation error as the program reads it: where, and what (cut short).
fn problem(e: &jsonschema::ValidationError<'_>) -> String {
    let path = e.instance_path().to_string();
    let mut text = if path.is_empty() { e.to_string() } else { format!("{path}: {e}") };
    if text.chars().count() > MAX_PROBLEM_CHARS {
        text = format!("{}…", text.chars().take(MAX_PROBLEM_CHARS).collect::<String>());
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schemas() -> Schemas {
        Schemas::compile(&[
            ToolDef::new("add").with_parameters(json!({
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]
            })),
            ToolDef::new("free"),
            ToolDef::new("add")
                .with_namespace("calc")
                .with_parameters(json!({"type": "object", "properties": {"x": {}}, "required": ["x"]})),
        ])
        .unwrap()
    }

    #[test]
    fn inputs_are_checked_against_their_tools_schema() {
        let s = schemas();
        assert_eq!(s.check("", "add", r#"{"a": 1, "b": 2}"#), Ok(()));
        let err = s.check("", "add", r#"{"a": "x"}"#).unwrap_err();
        assert!(err.starts_with("invalid input for tool \"add\""), "{err}");
        assert!(err.contains("/a") && err.contains("\"b\" is a required property"), "{err}");
        assert_eq!(s.check("", "free", r#"{"anything": [1, 2]}"#), Ok(()), "no schema: any JSON");
        assert!(s.check("", "free", "{nope").unwrap_err().contains("is not JSON"));
        assert_eq!(s.check("", "other", "{}"), Err("unknown tool \"other\"".into()));
        // Same name, another namespace: its own schema.
        assert_eq!(s.check("calc", "add", r#"{"x": 1}"#), Ok(()));
        assert!(s.check("calc", "add", r#"{"a": 1, "b": 2}"#).unwrap_err().contains("tool \"calc.add\""));
        assert_eq!(s.check("calc", "sub", "{}"), Err("unknown tool \"calc.sub\"".into()));
    }

    #[test]
    fn a_costly_check_leaves_the_async_thread_and_one_past_the_bound_is_refused_unrun() {
        let branches: Vec<serde_json::Value> =
            (0..200).map(|i| json!({"type": "object", "required": [format!("k{i}")]})).collect();
        let s = Schemas::compile(&[ToolDef::new("t").with_parameters(json!({
            "type": "object", "properties": {"rows": {"type": "array", "items": {"anyOf": branches}}}
        }))])
        .unwrap();
        let rows = |n: usize| json!({"rows": vec![json!({"k199": 1}); n]}).to_string();
        assert_eq!(s.check_inline("", "t", &rows(2)), Some(Ok(())), "404 steps run inline");
        assert_eq!(s.check_inline("", "t", &rows(20)), None, "4,022 steps: past what runs inline");
        assert_eq!(s.check("", "t", &rows(20)), Ok(()));
        let bad = json!({"rows": [{"k199": 1}, {"nope": 1}]}).to_string();
        let err = s.check("", "t", &bad).unwrap_err();
        assert!(err.starts_with("invalid input for tool \"t\": /rows/1: "), "{err}");
        // 5,000 rows of 201 visits each: refused before jsonschema runs.
        let err = s.check("", "t", &rows(5000)).unwrap_err();
        assert!(err.contains("too large to check against its schema"), "{err}");
    }

    #[test]
    fn a_schema_whose_checks_multiply_is_refused_when_given() {
        let defs = cost::tests::chain(21);
        let tool =
            ToolDef::new("chain").with_parameters(json!({"$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}));
        let err = check_tool_schema(&tool).unwrap_err();
        assert!(err.message().contains("too costly to check inputs against"), "{err}");
        assert!(Schemas::compile(&[tool]).is_err());
    }

    #[test]
    fn bad_schemas_are_refused_and_remote_refs_are_never_fetched() {
        let refused = |parameters| Schemas::compile(&[ToolDef::new("t").with_parameters(parameters)]).err().unwrap();
        assert!(refused(json!([1])).message().contains("must be a JSON Schema object"));
        assert!(refused(json!({"type": 5})).message().contains("invalid JSON Schema"));
        // Built without resolvers: a remote reference fails to compile instead of fetching.
        assert!(refused(json!({"$ref": "http://127.0.0.1:9/schema.json"})).message().contains("invalid JSON Schema"));
    }
}

/// `cargo test -p ptc-engine --lib measure_check_costs -- --ignored --nocapture`: how long the
/// count and jsonschema take on the costliest shapes measured (the bounds table in docs/limits.md).
#[cfg(test)]
mod measure {
    use super::*;
    use serde_json::json;

    #[test]
    #[ignore]
    fn measure_check_costs() {
        type Branch = Box<dyn Fn(usize) -> serde_json::Value>;
        let cases: Vec<(&str, Branch, serde_json::Value)> = vec![
            ("required", Box::new(|i| json!({"type": "object", "required": [format!("k{i}")]})), json!({"k199": 1})),
            (
                "pattern",
                Box::new(|i| json!({"type": "object", "properties": {"a": {"pattern": format!("^(a|b)*{i}$")}}})),
                json!({"a": "abababababababab199"}),
            ),
        ];
        for (label, branch, item) in cases {
            let branches: Vec<serde_json::Value> = (0..200).map(&branch).collect();
            let tool = ToolDef::new("t").with_parameters(json!({"type": "array", "items": {"anyOf": branches}}));
            let s = Schemas::compile(&[tool]).unwrap();
            let Some(compiled) = &s.validators[&(String::new(), "t".to_string())] else { unreachable!() };
            // Every element matches only the last branch: jsonschema tries all 200.
            let value = serde_json::Value::Array(vec![item; 2_400]);
            for _ in 0..3 {
                let t = std::time::Instant::now();
                let steps = compiled.graph.cost(&value, u64::MAX).unwrap();
                let counted = t.elapsed();
                let t = std::time::Instant::now();
                assert!(compiled.validator.is_valid(&value));
                println!("{label}: {steps} steps, counted in {counted:?}, checked in {:?}", t.elapsed());
            }
        }
    }
}
