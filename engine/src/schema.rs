//! Tool input validation on the host, before a call leaves the sandbox.
//!
//! Schemas are compiled once per execution with remote `$ref` resolution off (the crate is
//! built without its HTTP/file resolvers), so a schema cannot make the host fetch anything.

use std::collections::HashMap;

use jsonschema::Validator;

use crate::error::{Error, Result};
use crate::request::ToolDef;

pub(crate) struct Schemas {
    validators: HashMap<String, Option<Validator>>,
}

impl Schemas {
    pub(crate) fn compile(tools: &[ToolDef]) -> Result<Self> {
        let mut validators = HashMap::with_capacity(tools.len());
        for tool in tools {
            let validator = match &tool.parameters {
                None => None,
                Some(schema) if schema.is_object() || schema.is_boolean() => Some(
                    jsonschema::validator_for(schema).map_err(|e| {
                        Error::invalid(format!("tool {:?} has an invalid JSON Schema: {e}", tool.name))
                    })?,
                ),
                Some(_) => {
                    return Err(Error::invalid(format!(
                        "tool {:?}: parameters must be a JSON Schema object",
                        tool.name
                    )));
                }
            };
            validators.insert(tool.name.clone(), validator);
        }
        Ok(Schemas { validators })
    }

    /// `Err(message)` for the program's `ToolError` when the call must not leave the sandbox.
    pub(crate) fn check(&self, name: &str, input: &str) -> std::result::Result<(), String> {
        let Some(validator) = self.validators.get(name) else {
            return Err(format!("unknown tool {name:?}"));
        };
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
