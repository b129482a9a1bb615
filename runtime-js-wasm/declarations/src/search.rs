//! Finding tools from inside a JavaScript program, for tool sets too large to list in a
//! model's prompt: `search_tools("create an issue")` gives the signatures (with their first
//! sentence) of the tools that match best, `describe_tools(["github.create_issue"])` their
//! declarations. The ranking is the Python runtime's (`discovery.py`): a query's words found
//! in a tool's name count most, then its namespace, then its description and parameters'
//! names, each weighed by how rare it is among the tools.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{Declared, ToolDef, closest, code_name, declarations_of, ident};

/// Words that say nothing about which tool is meant. Verbs ("get", "list") stay: tool names
/// are made of them, and their rarity weighs them.
const STOP: &[&str] = &[
    "a", "an", "the", "to", "of", "for", "in", "on", "and", "or", "by", "with", "my", "me", "i", "tool", "tools",
    "from", "that", "is", "it", "this", "do", "how", "some", "which",
];
/// How much a word counts where it is found; a query word that begins a name's word (or the
/// reverse) counts `PREFIX`.
const NAME: f64 = 3.0;
const SPACE: f64 = 1.5;
const TEXT: f64 = 1.0;
const PREFIX: f64 = 1.5;
/// Tools scoring below this share of the best are not shown.
const CUTOFF: f64 = 0.4;

/// The words of `text`: camelCase and snake_case split, lower case, stop words left out, each
/// crudely stemmed (`issues`/`issue`, `created`/`create`).
fn terms(text: &str) -> HashSet<String> {
    let mut spaced = String::with_capacity(text.len() + 8);
    let mut last: Option<char> = None;
    for c in text.chars() {
        if c.is_ascii_uppercase() && last.is_some_and(|l| l.is_ascii_lowercase() || l.is_ascii_digit()) {
            spaced.push(' ');
        }
        spaced.push(c);
        last = Some(c);
    }
    let lower = spaced.to_lowercase();
    lower
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|w| !w.is_empty() && !STOP.contains(w))
        .map(stem)
        .collect()
}

fn stem(word: &str) -> String {
    for end in ["ies", "es", "s", "ed", "ing"] {
        if word.len() > end.len() + 2 && word.ends_with(end) {
            let stem = &word[..word.len() - end.len()];
            return if end == "ies" { format!("{stem}y") } else { stem.to_owned() };
        }
    }
    word.to_owned()
}

/// The first sentence of a description, at most 100 characters.
fn summary(description: &str) -> String {
    let first = description.trim().split('\n').next().unwrap_or_default();
    let sentence = first.find(". ").map_or(first, |i| &first[..=i]);
    if sentence.chars().count() <= 100 {
        sentence.to_owned()
    } else {
        sentence.chars().take(99).collect::<String>() + "…"
    }
}

/// The names of a schema's properties, nested ones too (at most 200).
fn property_names(schema: &Value, out: &mut Vec<String>) {
    let Value::Object(o) = schema else { return };
    if let Some(Value::Object(props)) = o.get("properties") {
        for (name, inner) in props {
            if out.len() >= 200 {
                return;
            }
            out.push(name.clone());
            property_names(inner, out);
        }
    }
    if let Some(items) = o.get("items") {
        property_names(items, out);
    }
}

/// Each tool's words by where they are, and how rare each word is among the tools.
struct Index<'a> {
    tools: &'a [ToolDef<'a>],
    rows: Vec<[HashSet<String>; 3]>,
    weight: HashMap<String, f64>,
}

impl<'a> Index<'a> {
    fn new(tools: &'a [ToolDef<'a>]) -> Self {
        let mut count: HashMap<String, usize> = HashMap::new();
        let rows: Vec<[HashSet<String>; 3]> = tools
            .iter()
            .map(|t| {
                let mut props = Vec::new();
                if let Ok(schema) = serde_json::from_str::<Value>(t.parameters) {
                    property_names(&schema, &mut props);
                }
                let description: String = t.description.chars().take(500).collect();
                let mut text = terms(&description);
                text.extend(terms(&props.join(" ")));
                let row = [terms(t.name), terms(t.namespace), text];
                let all: HashSet<&String> = row.iter().flatten().collect();
                for w in all {
                    *count.entry(w.clone()).or_default() += 1;
                }
                row
            })
            .collect();
        let n = tools.len().max(1) as f64;
        let weight = count.into_iter().map(|(w, c)| (w, (1.0 + n / c as f64).ln())).collect();
        Index { tools, rows, weight }
    }

    fn score(&self, row: &[HashSet<String>; 3], wanted: &HashSet<String>) -> f64 {
        let [name, space, text] = row;
        wanted
            .iter()
            .map(|w| {
                let weight = self.weight.get(w).copied().unwrap_or(1.0);
                if name.contains(w) {
                    NAME * weight
                } else if space.contains(w) {
                    SPACE * weight
                } else if text.contains(w) {
                    TEXT * weight
                } else if w.len() > 2
                    && name.iter().any(|n| n.len() > 2 && (n.starts_with(w.as_str()) || w.starts_with(n.as_str())))
                {
                    PREFIX * weight
                } else {
                    0.0
                }
            })
            .sum()
    }
}

/// The tools that best match `query`, one signature a line (`// ` and its first sentence),
/// best first, at most `limit`; or what to do when none does.
pub fn search(tools: &[ToolDef<'_>], query: &str, limit: usize) -> String {
    let wanted = terms(query);
    if wanted.is_empty() {
        return "search_tools(query): say what the tool should do, e.g. search_tools(\"create issue\")".into();
    }
    let index = Index::new(tools);
    let mut scored: Vec<(f64, usize)> = index
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| (index.score(row, &wanted), i))
        .filter(|(score, _)| *score > 0.0)
        .collect();
    let quoted = serde_json::to_string(query).unwrap_or_default();
    if scored.is_empty() {
        let mut spaces: Vec<String> =
            tools.iter().filter(|t| !t.namespace.is_empty()).map(|t| ident(t.namespace)).collect();
        spaces.sort();
        spaces.dedup();
        let where_ = if spaces.is_empty() {
            String::new()
        } else {
            format!("; the namespaces are {} (Object.keys(namespace) lists one's tools)", spaces.join(", "))
        };
        return format!("no tool matches {quoted}{where_}");
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let best = scored[0].0;
    let relevant: Vec<usize> = scored.iter().filter(|(s, _)| *s >= CUTOFF * best).map(|(_, i)| *i).collect();
    let shown = &relevant[..relevant.len().min(limit.max(1))];
    let mut lines: Vec<String> = shown
        .iter()
        .map(|&i| {
            let tool = &index.tools[i];
            let line = Declared::of(tool).line();
            match summary(tool.description) {
                s if s.is_empty() => line,
                s => format!("{line}  // {s}"),
            }
        })
        .collect();
    if relevant.len() > shown.len() {
        lines.push(format!("(and {} more; search_tools({quoted}, {}))", relevant.len() - shown.len(), relevant.len()));
    }
    lines.join("\n")
}

/// The declarations of the tools `names` names (`"github.create_issue"`, as a program calls
/// it, or as the tool list names it), with a note for each name that is no tool's.
pub fn describe(tools: &[ToolDef<'_>], names: &[String]) -> String {
    let mut by_name: Vec<(String, usize)> = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        by_name.push((code_name(t.namespace, t.name), i));
        let listed = if t.namespace.is_empty() { t.name.to_owned() } else { format!("{}.{}", t.namespace, t.name) };
        by_name.push((listed, i));
    }
    let (mut chosen, mut unknown) = (Vec::new(), Vec::new());
    for name in names {
        match by_name.iter().find(|(n, _)| n == name) {
            Some((_, i)) if !chosen.contains(i) => chosen.push(*i),
            Some(_) => {}
            None => unknown.push(name),
        }
    }
    let chosen: Vec<ToolDef<'_>> = chosen.into_iter().map(|i| tools[i]).collect();
    let mut text = if chosen.is_empty() { String::new() } else { declarations_of(&chosen) };
    if !unknown.is_empty() {
        let notes: Vec<String> = unknown
            .iter()
            .map(|name| match closest(name, by_name.iter().map(|(n, _)| n), 0.6) {
                Some(n) => format!("// no tool {name:?}; did you mean {n:?}?"),
                None => format!("// no tool {name:?}"),
            })
            .collect();
        let rest = if text.is_empty() {
            "\n// search_tools(query) finds tools by what they do".into()
        } else {
            format!("\n\n{text}")
        };
        text = notes.join("\n") + &rest;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolDef<'static>> {
        let issue = r#"{"type":"object","properties":{"title":{"type":"string"},"body":{"type":"string"}},"required":["title"]}"#;
        vec![
            ToolDef {
                name: "create_issue",
                namespace: "github",
                description: "Create a new issue. Returns it.",
                parameters: issue,
                ..Default::default()
            },
            ToolDef {
                name: "list_issues",
                namespace: "github",
                description: "List the issues of a repository.",
                ..Default::default()
            },
            ToolDef {
                name: "search_pages",
                namespace: "notion",
                description: "Search pages by title.",
                ..Default::default()
            },
            ToolDef { name: "get-weather", description: "The weather in a city.", ..Default::default() },
        ]
    }

    #[test]
    fn the_best_matches_come_first_with_their_first_sentence() {
        let found = search(&tools(), "create an issue", 10);
        let first = found.lines().next().unwrap();
        assert_eq!(
            first,
            "github.create_issue(args: { title: string; body?: string }): Promise<unknown>  // Create a new issue."
        );
        assert!(!found.contains("notion"), "{found}");
        let one = search(&tools(), "issues", 1);
        assert!(one.ends_with("(and 1 more; search_tools(\"issues\", 2))"), "{one}");
        assert!(search(&tools(), "the", 10).starts_with("search_tools(query): say what"));
        assert_eq!(
            search(&tools(), "zebra", 10),
            "no tool matches \"zebra\"; the namespaces are github, notion (Object.keys(namespace) lists one's tools)"
        );
        assert!(
            search(&tools(), "weather", 10).starts_with("get_weather(args?: "),
            "{}",
            search(&tools(), "weather", 10)
        );
    }

    #[test]
    fn describe_gives_declarations_and_says_what_is_no_tool() {
        let text = describe(&tools(), &["github.create_issue".into(), "get-weather".into()]);
        assert!(text.contains("declare namespace github {\n  /** Create a new issue. Returns it. */\n  function create_issue(args: { title: string; body?: string }): Promise<unknown>;"), "{text}");
        assert!(
            text.contains("declare function get_weather(args?: Record<string, unknown>): Promise<unknown>;"),
            "{text}"
        );
        let text = describe(&tools(), &["github.create_isue".into()]);
        assert_eq!(
            text,
            "// no tool \"github.create_isue\"; did you mean \"github.create_issue\"?\n// search_tools(query) finds tools by what they do"
        );
    }
}
