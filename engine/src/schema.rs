//! Tool input validation on the host, before a call leaves the sandbox.
//!
//! Schemas are compiled once per execution with remote `$ref` resolution off (the crate is
//! built without its HTTP/file resolvers), so a schema cannot make the host fetch anything.

use std::collections::HashMap;

use jsonschema::Validator;

use crate::error::{Error, Result};
use crate::host::label;
use crate::request::ToolDef;

pub(crate) struct Schemas {
    /// By (namespace or "", name): names are unique only within a namespace.
    validators: HashMap<(String, String), Option<Validator>>,
}

impl Schemas {
    pub(crate) fn compile(tools: &[ToolDef]) -> Result<Self> {
        let mut validators = HashMap::with_capacity(tools.len());
        for tool in tools {
            let validator = match &tool.parameters {
                None => None,
                Some(schema) if schema.is_object() || schema.is_boolean() => Some(
                    jsonschema::validator_for(schema)
                        .map_err(|e| Error::invalid(format!("tool {:?} has an invalid JSON Schema: {e}", tool.name)))?,
                ),
                Some(_) => {
                    return Err(Error::invalid(format!(
                        "tool {:?}: parameters must be a JSON Schema object",
                        tool.name
                    )));
                }
            };
            validators.insert((tool.namespace.clone().unwrap_or_default(), tool.name.clone()), validator);
        }
        Ok(Schemas { validators })
    }

    /// `Err(message)` for the program's `ToolError` when the call must not leave the sandbox.
    pub(crate) fn check(&self, namespace: &str, name: &str, input: &str) -> std::result::Result<(), String> {
        let Some(validator) = self.validators.get(&(namespace.to_string(), name.to_string())) else {
            return Err(format!("unknown tool {:?}", label(namespace, name)));
        };
        let name = label(namespace, name);
        let value: serde_json::Value =
            serde_json::from_str(input).map_err(|e| format!("input of {name:?} is not JSON: {e}"))?;
        let Some(validator) = validator else { return Ok(()) };
        let problems: Vec<String> = validator
            .iter_errors(&value)
            .take(5)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() { e.to_string() } else { format!("{path}: {e}") }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("invalid input for tool {name:?}: {}", problems.join("; ")))
        }
    }
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
    fn bad_schemas_are_refused_and_remote_refs_are_never_fetched() {
        let refused = |parameters| Schemas::compile(&[ToolDef::new("t").with_parameters(parameters)]).err().unwrap();
        assert!(refused(json!([1])).message().contains("must be a JSON Schema object"));
        assert!(refused(json!({"type": 5})).message().contains("invalid JSON Schema"));
        // Built without resolvers: a remote reference fails to compile instead of fetching.
        assert!(refused(json!({"$ref": "http://127.0.0.1:9/schema.json"})).message().contains("invalid JSON Schema"));
    }
}
