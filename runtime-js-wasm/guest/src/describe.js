// Tools as a model reads them in JavaScript or TypeScript (`describe-tools`): how a program
// names each, a one-line signature, and a `.d.ts` declaring them all. Evaluated as
// `ptc:describe` in a runtime of its own; called with the tool list, it returns
// {signatures: [[codeName, signature]...], stub}. JSON Schema becomes TypeScript types, nested at
// most DEPTH deep (deeper: `unknown`), `$ref`s into the schema's own `$defs` followed.
(function (tools) {
  'use strict';
  const DEPTH = 6;
  const ident = (n) => n.replace(/[-.]/g, '_');
  const key = (k) => (/^[A-Za-z_$][\w$]*$/.test(k) ? k : JSON.stringify(k));
  const grouped = (t) => (/[|&]/.test(t) && !/^[{(]/.test(t) ? `(${t})` : t);
  const comment = (text, indent) => {
    const lines = String(text).replace(/\*\//g, '*\u200b/').trim().split('\n');
    if (!lines[0]) return '';
    if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
    return `${indent}/**\n${lines.map((l) => `${indent} * ${l}`.trimEnd()).join('\n')}\n${indent} */\n`;
  };

  function type(s, root, depth) {
    if (s === true || s === undefined || s === null) return 'unknown';
    if (typeof s !== 'object' || depth > DEPTH) return 'unknown';
    if (typeof s.$ref === 'string') {
      const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(s.$ref);
      const target = m && root[m[1]] && root[m[1]][m[2]];
      return target ? type(target, root, depth + 1) : 'unknown';
    }
    if (s.const !== undefined) return JSON.stringify(s.const);
    if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(' | ') || 'never';
    const alternatives = s.anyOf || s.oneOf;
    if (Array.isArray(alternatives)) return [...new Set(alternatives.map((a) => type(a, root, depth + 1)))].join(' | ');
    if (Array.isArray(s.allOf)) return s.allOf.map((a) => grouped(type(a, root, depth + 1))).join(' & ') || 'unknown';
    const kinds = Array.isArray(s.type) ? s.type : [s.type === undefined && s.properties ? 'object' : s.type];
    return kinds
      .map((kind) => {
        switch (kind) {
          case 'string': return 'string';
          case 'integer': case 'number': return 'number';
          case 'boolean': return 'boolean';
          case 'null': return 'null';
          case 'array': return `${grouped(type(s.items, root, depth + 1))}[]`;
          case 'object': return object(s, root, depth);
          default: return 'unknown';
        }
      })
      .join(' | ');
  }

  function object(s, root, depth) {
    const props = s.properties || {};
    const required = new Set(Array.isArray(s.required) ? s.required : []);
    const fields = Object.keys(props).map((k) => `${key(k)}${required.has(k) ? '' : '?'}: ${type(props[k], root, depth + 1)}`);
    if (s.additionalProperties && typeof s.additionalProperties === 'object') {
      fields.push(`[key: string]: ${type(s.additionalProperties, root, depth + 1)}`);
    }
    return fields.length ? `{ ${fields.join('; ')} }` : 'Record<string, unknown>';
  }

  const parse = (text) => {
    try { return text ? JSON.parse(text) : undefined; } catch (e) { return undefined; }
  };

  const described = tools.map(([name, description, parameters, namespace, returns, observed]) => {
    const schema = parse(parameters) || {};
    const args = type(Object.assign({ type: 'object' }, schema), schema, 0);
    const optional = !(Array.isArray(schema.required) && schema.required.length);
    const output = parse(returns);
    const result = output === undefined ? 'unknown' : type(output, output, 0);
    const fn = ident(name);
    const signature = `(args${optional ? '?' : ''}: ${args}): Promise<${result}>${observed && output !== undefined ? ' /* observed */' : ''}`;
    const codeName = namespace ? `${ident(namespace)}.${fn}` : fn;
    return { codeName, fn, namespace: namespace ? ident(namespace) : '', signature, description };
  });

  let stub = '/** A failed tool call: `message` is the tool\'s words, `tool` its name. */\n' +
    'declare class ToolError extends Error { tool: string }\n';
  for (const d of described.filter((d) => !d.namespace)) {
    stub += `\n${comment(d.description, '')}declare function ${d.fn}${d.signature};\n`;
  }
  const spaces = [...new Set(described.filter((d) => d.namespace).map((d) => d.namespace))];
  for (const ns of spaces) {
    stub += `\ndeclare namespace ${ns} {\n`;
    for (const d of described.filter((d) => d.namespace === ns)) {
      stub += `${comment(d.description, '  ')}  function ${d.fn}${d.signature};\n`;
    }
    stub += '}\n';
  }
  return { signatures: described.map((d) => [d.codeName, d.codeName + d.signature]), stub };
})
