//! Tools as a model reads them in JavaScript or TypeScript: how a program names each, a
//! one-line signature (`get_weather(args: { city: string; days?: number }): Promise<unknown>`)
//! and a `.d.ts` declaring them all (this module), and finding them by what they do
//! ([`search`]). JSON Schema becomes TypeScript types, nested at most six deep (deeper:
//! `unknown`), `$ref`s into the schema's own `$defs` followed.
//!
//! The engine renders them for its pre-run check's refusals and `describe_tools`; the
//! JavaScript guest for `search_tools` and `describe_tools` inside programs. Bounded by the
//! tools' size, which the engine checks first, and by that depth.

pub mod search;

use serde_json::Value;

/// One tool as the sandbox's WIT world hands it over: its schemas as JSON text (empty: none).
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolDef<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub parameters: &'a str,
    pub namespace: &'a str,
    pub returns: &'a str,
    /// `returns` is the shape results had, not a declared schema.
    pub observed: bool,
}

/// How deep a schema's types are written out.
const DEPTH: usize = 6;

/// The name a program calls a tool or a namespace by: `-` and `.` become `_`.
pub fn ident(name: &str) -> String {
    name.replace(['-', '.'], "_")
}

/// How a program calls tool `name` of `namespace` (empty: none): `get_weather`, or
/// `github.search_issues`.
pub fn code_name(namespace: &str, name: &str) -> String {
    if namespace.is_empty() { ident(name) } else { format!("{}.{}", ident(namespace), ident(name)) }
}

/// The name of `names` most like `name`, if one is at least `cutoff` alike (0 to 1; a tie goes
/// to the first in alphabetical order): what a "did you mean" names.
pub fn closest<S: AsRef<str>>(name: &str, names: impl Iterator<Item = S>, cutoff: f64) -> Option<S> {
    names
        .map(|n| (strsim::normalized_levenshtein(name, n.as_ref()), n))
        .filter(|(score, _)| *score >= cutoff)
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| b.1.as_ref().cmp(a.1.as_ref())))
        .map(|(_, n)| n)
}

/// One tool as a program sees it.
pub struct Declared {
    /// `get_weather`, or `github.search_issues` in a namespace.
    pub code_name: String,
    /// `(args: {...}): Promise<...>`, the part after the name.
    pub signature: String,
    fn_name: String,
    namespace: String,
}

impl Declared {
    pub fn of(tool: &ToolDef<'_>) -> Self {
        let schema = parse(tool.parameters).filter(truthy).unwrap_or_else(|| Value::Object(Default::default()));
        let mut with_type = serde_json::Map::new();
        with_type.insert("type".into(), "object".into());
        if let Value::Object(fields) = &schema {
            with_type.extend(fields.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let args = type_of(&Value::Object(with_type), &schema, 0);
        let optional = schema.get("required").and_then(Value::as_array).is_none_or(|r| r.is_empty());
        let output = parse(tool.returns);
        let result = output.as_ref().map_or_else(|| "unknown".into(), |o| type_of(o, o, 0));
        let observed = if tool.observed && output.is_some() { " /* observed */" } else { "" };
        let (fn_name, namespace) = (ident(tool.name), ident(tool.namespace));
        let code_name = code_name(tool.namespace, tool.name);
        let signature = format!("(args{}: {args}): Promise<{result}>{observed}", if optional { "?" } else { "" });
        Declared { code_name, signature, fn_name, namespace }
    }

    /// The whole line: `get_weather(args: ...): Promise<...>`.
    pub fn line(&self) -> String {
        format!("{}{}", self.code_name, self.signature)
    }
}

/// The `.d.ts` declaring `tools` (with `ToolError`), and each tool as declared there.
pub fn declarations(tools: &[ToolDef<'_>]) -> (Vec<Declared>, String) {
    let declared: Vec<Declared> = tools.iter().map(Declared::of).collect();
    let stub = String::from(
        "/** A failed tool call: `message` is the tool's words, `tool` its name. */\n\
         declare class ToolError extends Error { tool: string }\n",
    ) + &body(&declared, tools);
    (declared, stub)
}

/// The declarations of `tools` alone, their functions first, then each namespace's.
pub(crate) fn declarations_of(tools: &[ToolDef<'_>]) -> String {
    let declared: Vec<Declared> = tools.iter().map(Declared::of).collect();
    body(&declared, tools).trim_start().to_owned()
}

fn body(declared: &[Declared], tools: &[ToolDef<'_>]) -> String {
    let mut stub = String::new();
    for (d, t) in declared.iter().zip(tools).filter(|(d, _)| d.namespace.is_empty()) {
        stub += &format!("\n{}declare function {}{};\n", comment(t.description, ""), d.fn_name, d.signature);
    }
    let mut spaces: Vec<&str> = Vec::new();
    for d in declared.iter().filter(|d| !d.namespace.is_empty()) {
        if !spaces.contains(&d.namespace.as_str()) {
            spaces.push(&d.namespace);
        }
    }
    for space in spaces {
        stub += &format!("\ndeclare namespace {space} {{\n");
        for (d, t) in declared.iter().zip(tools).filter(|(d, _)| d.namespace == space) {
            stub += &format!("{}  function {}{};\n", comment(t.description, "  "), d.fn_name, d.signature);
        }
        stub += "}\n";
    }
    stub
}

/// A JSON text, or nothing when it is empty or not JSON.
fn parse(text: &str) -> Option<Value> {
    if text.is_empty() { None } else { serde_json::from_str(text).ok() }
}

/// JavaScript's truthiness, for what a schema holds where an object is expected.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

fn key(k: &str) -> String {
    let mut chars = k.chars();
    let plain = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if plain { k.to_owned() } else { json(&Value::String(k.to_owned())) }
}

fn json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// A union or intersection, parenthesised where it is an element type or a conjunct.
fn grouped(t: String) -> String {
    if (t.contains('|') || t.contains('&')) && !t.starts_with(['{', '(']) { format!("({t})") } else { t }
}

/// A description as a `/** */` comment at `indent`.
fn comment(text: &str, indent: &str) -> String {
    let text = text.replace("*/", "*\u{200b}/");
    let lines: Vec<&str> = text.trim().split('\n').collect();
    match lines.as_slice() {
        [""] => String::new(),
        [one] => format!("{indent}/** {one} */\n"),
        _ => {
            let body: Vec<String> = lines.iter().map(|l| format!("{indent} * {l}").trim_end().to_owned()).collect();
            format!("{indent}/**\n{}\n{indent} */\n", body.join("\n"))
        }
    }
}

/// Schema `s` (of the whole schema `root`, where its `$ref`s point) as a TypeScript type.
fn type_of(s: &Value, root: &Value, depth: usize) -> String {
    let Value::Object(o) = s else { return "unknown".into() };
    if depth > DEPTH {
        return "unknown".into();
    }
    if let Some(Value::String(reference)) = o.get("$ref") {
        let target = reference.strip_prefix("#/").and_then(|path| {
            let (defs, name) = path.split_once('/')?;
            (defs == "$defs" || defs == "definitions").then(|| root.get(defs)?.get(name)).flatten()
        });
        return target.filter(|t| truthy(t)).map_or_else(|| "unknown".into(), |t| type_of(t, root, depth + 1));
    }
    if let Some(constant) = o.get("const") {
        return json(constant);
    }
    if let Some(Value::Array(values)) = o.get("enum") {
        return if values.is_empty() { "never".into() } else { joined(values.iter().map(json), " | ") };
    }
    let alternatives = o.get("anyOf").filter(|a| truthy(a)).or_else(|| o.get("oneOf"));
    if let Some(Value::Array(alternatives)) = alternatives {
        let mut unique: Vec<String> = Vec::new();
        for t in alternatives.iter().map(|a| type_of(a, root, depth + 1)) {
            if !unique.contains(&t) {
                unique.push(t);
            }
        }
        return unique.join(" | ");
    }
    if let Some(Value::Array(all)) = o.get("allOf") {
        return if all.is_empty() {
            "unknown".into()
        } else {
            joined(all.iter().map(|a| grouped(type_of(a, root, depth + 1))), " & ")
        };
    }
    let implied = match o.get("type") {
        None if o.get("properties").is_some_and(truthy) => Value::String("object".into()),
        other => other.cloned().unwrap_or(Value::Null),
    };
    let kinds = match &implied {
        Value::Array(kinds) => kinds.clone(),
        one => vec![one.clone()],
    };
    joined(
        kinds.iter().map(|kind| match kind.as_str() {
            Some("string") => "string".into(),
            Some("integer" | "number") => "number".into(),
            Some("boolean") => "boolean".into(),
            Some("null") => "null".into(),
            Some("array") => {
                format!("{}[]", grouped(type_of(o.get("items").unwrap_or(&Value::Null), root, depth + 1)))
            }
            Some("object") => object(o, root, depth),
            _ => "unknown".into(),
        }),
        " | ",
    )
}

fn object(s: &serde_json::Map<String, Value>, root: &Value, depth: usize) -> String {
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
    let mut fields: Vec<String> = match s.get("properties") {
        Some(Value::Object(props)) => props
            .iter()
            .map(|(k, v)| {
                let optional = if required.contains(&k.as_str()) { "" } else { "?" };
                format!("{}{optional}: {}", key(k), type_of(v, root, depth + 1))
            })
            .collect(),
        _ => Vec::new(),
    };
    if let Some(extra @ (Value::Object(_) | Value::Array(_))) = s.get("additionalProperties") {
        fields.push(format!("[key: string]: {}", type_of(extra, root, depth + 1)));
    }
    if fields.is_empty() { "Record<string, unknown>".into() } else { format!("{{ {} }}", fields.join("; ")) }
}

fn joined(parts: impl Iterator<Item = String>, separator: &str) -> String {
    parts.collect::<Vec<_>>().join(separator)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool<'a>(name: &'a str, namespace: &'a str, parameters: &'a str, returns: &'a str) -> ToolDef<'a> {
        ToolDef {
            name,
            description: "Finds things.\nSecond line */ kept",
            parameters,
            namespace,
            returns,
            observed: false,
        }
    }

    #[test]
    fn schemas_become_typescript_types() {
        let schema = r##"{"type":"object","properties":{"q":{"type":"string"},"n":{"type":["integer","null"]},
            "tags":{"type":"array","items":{"anyOf":[{"type":"string"},{"type":"number"}]}},
            "mode":{"enum":["a","b"]},"opt":{"$ref":"#/$defs/Opt"},"my-key":{"const":1}},
            "required":["q"],"$defs":{"Opt":{"type":"object","properties":{"deep":{"type":"boolean"}}}}}"##;
        let d = Declared::of(&tool("search-all", "web.search", schema, r#"{"type":"object"}"#));
        assert_eq!(d.code_name, "web_search.search_all");
        assert_eq!(
            d.signature,
            "(args: { q: string; n?: number | null; tags?: (string | number)[]; mode?: \"a\" | \"b\"; \
             opt?: { deep?: boolean }; \"my-key\"?: 1 }): Promise<Record<string, unknown>>"
        );
        let none = Declared::of(&tool("ping", "", "", ""));
        assert_eq!(none.line(), "ping(args?: Record<string, unknown>): Promise<unknown>");
        let mut deep = String::from(r#"{"type":"string"}"#);
        for _ in 0..10 {
            deep = format!(r#"{{"type":"array","items":{deep}}}"#);
        }
        let deep = Declared::of(&tool("deep", "", &format!(r#"{{"properties":{{"x":{deep}}}}}"#), ""));
        assert!(deep.signature.contains("unknown[][]"), "{}", deep.signature);
    }

    #[test]
    fn the_stub_declares_functions_and_namespaces_with_their_descriptions() {
        let (_, stub) = declarations(&[tool("a", "", "", ""), tool("b", "gh", "", ""), tool("c", "gh", "", "")]);
        assert!(stub.starts_with("/** A failed tool call"), "{stub}");
        assert!(
            stub.contains("\n/**\n * Finds things.\n * Second line *\u{200b}/ kept\n */\ndeclare function a(args?: "),
            "{stub}"
        );
        assert!(stub.contains("declare namespace gh {\n  /**\n   * Finds things."), "{stub}");
        assert!(stub.contains("  function c(args?: Record<string, unknown>): Promise<unknown>;\n}\n"), "{stub}");
    }
}
