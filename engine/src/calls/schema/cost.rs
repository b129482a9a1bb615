//! What checking a value against a tool's JSON Schema can cost, known before jsonschema is asked.
//!
//! jsonschema cannot be interrupted once it validates, and a program controls the value: a
//! 4 KB schema (`items: {anyOf: [200 objects]}`) and a 400 KB input once cost 27.7 s of host
//! CPU per call, and a chain of 21 `anyOf`s through `$ref`s doubles the work at every link. So
//! the host first walks the schema's applicators over the value ([`Graph::cost`]), counting
//! one step per (subschema, value) visit, and stops at a budget. The count is an upper bound of
//! what jsonschema visits (it also short-circuits, caches `$ref` results and cuts cycles).
//!
//! The graph is built once per schema, with references resolved the way jsonschema resolves
//! them (`referencing`, its own resolver): `$id` scopes, anchors and JSON pointers alike.

use std::collections::HashMap;

use referencing::{Draft, Resolver, ResourceRef, SPECIFICATIONS};
use serde_json::Value;

/// Keywords whose subschemas apply to the value itself.
const IN_PLACE: &[&str] = &["not", "if", "then", "else"];
const IN_PLACE_LISTS: &[&str] = &["allOf", "anyOf", "oneOf"];
/// Keywords whose subschemas apply to every member value of an object (an upper bound for
/// `patternProperties`, which applies only to matching names).
const MEMBERS: &[&str] = &["additionalProperties", "unevaluatedProperties"];
/// Keywords whose subschemas apply to every element of an array.
const ELEMENTS: &[&str] = &["additionalItems", "contains", "unevaluatedItems"];
/// Reference keywords, all resolved like `$ref` (an upper bound for the dynamic ones).
const REFS: &[&str] = &["$ref", "$dynamicRef", "$recursiveRef"];

/// The most subschemas a graph holds; a larger schema is refused (a 256 KiB tool definition
/// holds far fewer).
const MAX_NODES: usize = 200_000;

#[derive(Debug, Default)]
struct Node {
    in_place: Vec<u32>,
    /// Sorted by name.
    properties: Vec<(String, u32)>,
    members: Vec<u32>,
    /// Applied to each member's *name* (`propertyNames`).
    names: Vec<u32>,
    elements: Vec<u32>,
}

/// A schema's applicators as a graph of subschemas, references resolved.
#[derive(Debug)]
pub(crate) struct Graph {
    nodes: Vec<Node>,
}

/// A visit of a string value costs one step more per this many bytes of it.
const STRING_BYTES_PER_STEP: u64 = 256;

/// The URI a tool's schema is registered under; its own `$id` takes over inside it.
const BASE: &str = "urn:ptc-engine:tool-input";

impl Graph {
    /// The graph of `schema`; `Err` if it is larger than [`MAX_NODES`] subschemas.
    pub(crate) fn build(schema: &Value) -> Result<Graph, String> {
        let draft = Draft::default().detect(schema);
        // On top of the meta-schemas, which a schema may refer to as jsonschema lets it.
        let registry = match SPECIFICATIONS.add(BASE, schema).and_then(|b| b.draft(draft).prepare()) {
            Ok(registry) => registry,
            // jsonschema compiles the schema too and says what is wrong with it.
            Err(_) => return Ok(Graph { nodes: vec![Node::default()] }),
        };
        let base = referencing::uri::from_str(BASE).expect("a valid URI");
        let mut builder = Builder { nodes: Vec::new(), index: HashMap::new(), queue: Vec::new(), draft };
        builder.node(schema, registry.resolver(base))?;
        while let Some((id, value, resolver)) = builder.queue.pop() {
            builder.fill(id, value, resolver)?;
        }
        Ok(Graph { nodes: builder.nodes })
    }

    /// Steps that checking `instance` against the schema takes at most, or `None` when that
    /// is more than `budget`.
    pub(crate) fn cost(&self, instance: &Value, budget: u64) -> Option<u64> {
        static NAME: Value = Value::Null;
        let mut steps = 0u64;
        // Applications of a subschema to a value, waiting; and the walk of one application's
        // in-place subschemas (depth first, with the subschemas on the current path marked:
        // a subschema reached again on the same value is a cycle jsonschema cuts).
        let mut apps: Vec<(u32, &Value)> = vec![(0, instance)];
        let mut on_path = vec![false; self.nodes.len()];
        let mut walk: Vec<(u32, bool)> = Vec::new();
        while let Some((root, value)) = apps.pop() {
            walk.push((root, false));
            while let Some((id, leaving)) = walk.pop() {
                let i = id as usize;
                if leaving {
                    on_path[i] = false;
                    continue;
                }
                // A string costs more the longer it is (patterns and formats read all of it).
                steps += 1 + value.as_str().map_or(0, |t| t.len() as u64 / STRING_BYTES_PER_STEP);
                if steps > budget {
                    return None;
                }
                if on_path[i] {
                    continue;
                }
                on_path[i] = true;
                walk.push((id, true));
                let node = &self.nodes[i];
                walk.extend(node.in_place.iter().map(|&c| (c, false)));
                match value {
                    Value::Object(map)
                        if !(node.properties.is_empty() && node.members.is_empty() && node.names.is_empty()) =>
                    {
                        for (key, member) in map {
                            if let Ok(at) =
                                node.properties.binary_search_by(|(name, _)| name.as_str().cmp(key.as_str()))
                            {
                                apps.push((node.properties[at].1, member));
                            }
                            apps.extend(node.members.iter().map(|&c| (c, member)));
                            apps.extend(node.names.iter().map(|&c| (c, &NAME)));
                        }
                    }
                    Value::Array(items) if !node.elements.is_empty() => {
                        for item in items {
                            apps.extend(node.elements.iter().map(|&c| (c, item)));
                        }
                    }
                    _ => {}
                }
                // Pending applications count against the budget before they are walked, so
                // the queue itself stays within it.
                if apps.len() as u64 > budget.saturating_sub(steps) {
                    return None;
                }
            }
        }
        Some(steps)
    }

    /// The most in-place subschemas that checking a single value can visit through one
    /// subschema (allOf/anyOf/oneOf through `$ref`s multiply), capped just past `limit`.
    pub(crate) fn widest(&self, limit: u64) -> u64 {
        // Paths counted per subschema in post-order over the in-place edges, a back edge (a
        // cycle) counting one visit as jsonschema's cycle guard does.
        let n = self.nodes.len();
        let mut paths: Vec<Option<u64>> = vec![None; n];
        let mut state = vec![0u8; n]; // 0 new, 1 on the stack, 2 done
        let mut widest = 0;
        for start in 0..n {
            if state[start] != 0 {
                continue;
            }
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(&mut (i, ref mut next)) = stack.last_mut() {
                let children = &self.nodes[i].in_place;
                if *next < children.len() {
                    let c = children[*next] as usize;
                    *next += 1;
                    if state[c] == 0 {
                        state[c] = 1;
                        stack.push((c, 0));
                    }
                    continue;
                }
                let mut total = 1u64;
                for &c in children {
                    let c = c as usize;
                    let sub = if state[c] == 1 { 1 } else { paths[c].unwrap_or(1) };
                    total = total.saturating_add(sub).min(limit + 1);
                }
                paths[i] = Some(total);
                state[i] = 2;
                widest = widest.max(total);
                stack.pop();
            }
        }
        widest
    }
}

struct Builder<'r> {
    nodes: Vec<Node>,
    /// By the subschema's address in the schema (or in a meta-schema it refers to).
    index: HashMap<usize, u32>,
    queue: Vec<(u32, &'r Value, Resolver<'r>)>,
    draft: Draft,
}

impl<'r> Builder<'r> {
    /// The node of subschema `value`, queued to be filled the first time it is seen.
    fn node(&mut self, value: &'r Value, resolver: Resolver<'r>) -> Result<u32, String> {
        let key = value as *const Value as usize;
        if let Some(&id) = self.index.get(&key) {
            return Ok(id);
        }
        if self.nodes.len() >= MAX_NODES {
            return Err(format!("it has more than {MAX_NODES} subschemas"));
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node::default());
        self.index.insert(key, id);
        self.queue.push((id, value, resolver));
        Ok(id)
    }

    fn fill(&mut self, id: u32, value: &'r Value, resolver: Resolver<'r>) -> Result<(), String> {
        let Value::Object(schema) = value else { return Ok(()) };
        // A subschema with its own `$id` resolves references against it.
        let resolver = resolver.in_subresource(ResourceRef::new(value, self.draft)).unwrap_or(resolver);
        let mut node = Node::default();
        for &key in IN_PLACE {
            if let Some(sub) = schema.get(key) {
                node.in_place.push(self.node(sub, resolver.clone())?);
            }
        }
        for &key in IN_PLACE_LISTS {
            for sub in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
                node.in_place.push(self.node(sub, resolver.clone())?);
            }
        }
        for key in ["dependentSchemas", "dependencies"] {
            for sub in schema.get(key).and_then(Value::as_object).into_iter().flat_map(|m| m.values()) {
                // `dependencies` also takes lists of names, which are not subschemas.
                if sub.is_object() || sub.is_boolean() {
                    node.in_place.push(self.node(sub, resolver.clone())?);
                }
            }
        }
        for &key in REFS {
            if let Some(reference) = schema.get(key).and_then(Value::as_str)
                && let Ok(resolved) = resolver.lookup(reference)
            {
                let (target, target_resolver, _) = resolved.into_inner();
                node.in_place.push(self.node(target, target_resolver)?);
            }
        }
        for (name, sub) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
            node.properties.push((name.clone(), self.node(sub, resolver.clone())?));
        }
        node.properties.sort_by(|a, b| a.0.cmp(&b.0));
        for sub in schema.get("patternProperties").and_then(Value::as_object).into_iter().flat_map(|m| m.values()) {
            node.members.push(self.node(sub, resolver.clone())?);
        }
        for &key in MEMBERS {
            if let Some(sub) = schema.get(key) {
                node.members.push(self.node(sub, resolver.clone())?);
            }
        }
        if let Some(sub) = schema.get("propertyNames") {
            node.names.push(self.node(sub, resolver.clone())?);
        }
        match schema.get("items") {
            Some(Value::Array(subs)) => {
                for sub in subs {
                    node.elements.push(self.node(sub, resolver.clone())?);
                }
            }
            Some(sub) => node.elements.push(self.node(sub, resolver.clone())?),
            None => {}
        }
        for sub in schema.get("prefixItems").and_then(Value::as_array).into_iter().flatten() {
            node.elements.push(self.node(sub, resolver.clone())?);
        }
        for &key in ELEMENTS {
            if let Some(sub) = schema.get(key) {
                node.elements.push(self.node(sub, resolver.clone())?);
            }
        }
        self.nodes[id as usize] = node;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    fn graph(schema: Value) -> Graph {
        Graph::build(&schema).unwrap()
    }

    #[test]
    fn steps_grow_with_the_value_and_the_branches_that_apply_to_it() {
        let g = graph(
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"items": {"type": "string"}}}}),
        );
        assert_eq!(g.cost(&json!({"a": 1}), 1000), Some(2));
        assert_eq!(g.cost(&json!({"a": 1, "b": ["x", "y", "z"]}), 1000), Some(6));
        assert_eq!(g.cost(&json!({"c": [1, 2, 3]}), 1000), Some(1), "no subschema applies to c");
        let branches: Vec<Value> = (0..200).map(|i| json!({"required": [format!("k{i}")]})).collect();
        let g = graph(json!({"items": {"anyOf": branches}}));
        let items = Value::Array(vec![json!({}); 1000]);
        assert_eq!(g.cost(&items, u64::MAX), Some(1 + 1000 * 201));
        assert_eq!(g.cost(&items, 100_000), None, "past the budget the walk stops");
    }

    /// `$defs` of `links` `anyOf`s, each naming the next link twice: 2^links ways through.
    pub(crate) fn chain(links: usize) -> serde_json::Map<String, Value> {
        let mut defs = serde_json::Map::new();
        for i in 0..links {
            let next =
                if i + 1 == links { json!({"type": "string"}) } else { json!({"$ref": format!("#/$defs/d{}", i + 1)}) };
            defs.insert(format!("d{i}"), json!({"anyOf": [next.clone(), next]}));
        }
        defs
    }

    #[test]
    fn references_are_followed_and_a_chain_of_anyof_refs_multiplies() {
        let g = graph(json!({"$defs": chain(21), "$ref": "#/$defs/d0"}));
        assert!(g.widest(1_000_000) > 1_000_000, "2^21 paths reach the last link");
        assert_eq!(g.cost(&json!("x"), 1_000_000), None);
        // References through an `$id` scope and an anchor resolve as jsonschema resolves them.
        let g = graph(json!({
            "$id": "https://example.com/root.json",
            "properties": {"a": {"$ref": "item.json"}, "b": {"$ref": "#thing"}},
            "$defs": {
                "item": {"$id": "item.json", "properties": {"x": {"type": "string"}}},
                "thing": {"$anchor": "thing", "items": {"type": "number"}}
            }
        }));
        assert_eq!(g.cost(&json!({"a": {"x": "1"}, "b": [1, 2]}), 1000), Some(1 + 2 + 1 + 2 + 2));
    }

    #[test]
    fn recursion_is_bounded_by_the_value_and_cycles_in_place_are_cut() {
        let g = graph(
            json!({"$defs": {"tree": {"properties": {"children": {"items": {"$ref": "#/$defs/tree"}}}}}, "$ref": "#/$defs/tree"}),
        );
        let leaf = json!({"children": []});
        let tree = json!({"children": [leaf.clone(), {"children": [leaf]}]});
        assert!(g.cost(&tree, 1000).is_some());
        assert_eq!(g.widest(1000), 2);
        // A schema that refers to itself in place: each value visits it once more, then stops.
        let g = graph(json!({"anyOf": [{"$ref": "#"}, {"type": "string"}]}));
        assert_eq!(g.cost(&json!(1), 1000), Some(4));
        assert_eq!(g.widest(1000), 4);
    }
}
