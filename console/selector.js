// Label selectors as the API server parses and matches them (the grammar of
// k8s.io/apimachinery's labels.Parse, as src/server/selectors.rs has it), so
// a selector means the same in the live overview and in time travel.

const SPECIAL = new Set(['!', '=', '(', ')', ',', '<', '>']);

function tokenize(text) {
  const tokens = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const next = text[i + 1];
    if (/\s/.test(c)) {
      i += 1;
      continue;
    }
    const two = c + (next ?? '');
    if (two === '!=' || two === '==') {
      tokens.push({ kind: two });
      i += 2;
    } else if (SPECIAL.has(c)) {
      tokens.push({ kind: c });
      i += 1;
    } else {
      const start = i;
      while (i < text.length && !/\s/.test(text[i]) && !SPECIAL.has(text[i])) i += 1;
      const word = text.slice(start, i);
      tokens.push(word === 'in' || word === 'notin' ? { kind: word } : { kind: 'id', text: word });
    }
  }
  tokens.push({ kind: 'end' });
  return tokens;
}

const describe = (t) => (t.kind === 'id' ? `'${t.text}'` : t.kind === 'end' ? 'end of string' : `'${t.kind}'`);

const LABEL_NAME = /^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/;
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

function validateKey(key) {
  const slash = key.indexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : null;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== null && (prefix === '' || prefix.length > 253 || !prefix.split('.').every((l) => DNS_LABEL.test(l)))) {
    throw new Error(`invalid label key "${key}": the prefix "${prefix}" must be a lowercase DNS subdomain such as example.com`);
  }
  if (!LABEL_NAME.test(name)) {
    throw new Error(`invalid label key "${key}": the name part must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric`);
  }
}

function validateValue(key, value) {
  if (value !== '' && !LABEL_NAME.test(value)) {
    throw new Error(`invalid value "${value}" for label "${key}": at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric`);
  }
}

class Parser {
  constructor(text) {
    this.tokens = tokenize(text);
    this.at = 0;
  }
  peek() {
    return this.tokens[this.at] ?? { kind: 'end' };
  }
  next() {
    const t = this.peek();
    if (this.at < this.tokens.length) this.at += 1;
    return t;
  }
  // `in` and `notin` are keywords only where an operator is expected.
  nextWord() {
    const t = this.next();
    return t.kind === 'in' || t.kind === 'notin' ? { kind: 'id', text: t.kind } : t;
  }
  parse() {
    const requirements = [];
    for (;;) {
      const t = this.peek();
      if (t.kind === 'end') break;
      if (!['id', '!', 'in', 'notin'].includes(t.kind)) throw new Error(`found ${describe(t)}, expected: a label key`);
      requirements.push(this.requirement());
      const after = this.next();
      if (after.kind === ',') continue;
      if (after.kind === 'end') break;
      throw new Error(`found ${describe(after)}, expected: ',' or end of string`);
    }
    return requirements;
  }
  requirement() {
    let token = this.nextWord();
    let negated = false;
    if (token.kind === '!') {
      negated = true;
      token = this.nextWord();
    }
    if (token.kind !== 'id') throw new Error(`found ${describe(token)}, expected: a label key`);
    const key = token.text;
    validateKey(key);
    if (negated) return { key, op: '!' };
    if (['end', ','].includes(this.peek().kind)) return { key, op: 'exists' };
    const op = this.next();
    switch (op.kind) {
      case '=':
      case '==':
        return { key, op: '=', value: this.exactValue(key) };
      case '!=':
        return { key, op: '!=', value: this.exactValue(key) };
      case 'in':
      case 'notin':
        return { key, op: op.kind, values: this.valueSet(key) };
      case '>':
      case '<':
        return { key, op: op.kind, value: this.integer(key) };
      default:
        throw new Error(`found ${describe(op)} after "${key}", expected one of: =, ==, !=, in, notin, >, <`);
    }
  }
  exactValue(key) {
    if (['end', ','].includes(this.peek().kind)) return '';
    const t = this.nextWord();
    if (t.kind !== 'id') throw new Error(`found ${describe(t)} as the value of "${key}", expected: a label value`);
    validateValue(key, t.text);
    return t.text;
  }
  valueSet(key) {
    const open = this.next();
    if (open.kind !== '(') throw new Error(`found ${describe(open)} after the operator of "${key}", expected: '('`);
    const values = [];
    for (;;) {
      const t = this.nextWord();
      if (t.kind === 'id') {
        validateValue(key, t.text);
        values.push(t.text);
      } else if (t.kind === ',') {
        values.push('');
        continue;
      } else if (t.kind === ')') {
        if (values.length === 0) values.push('');
        return values;
      } else {
        throw new Error(`found ${describe(t)} in the values of "${key}", expected: a label value, ',' or ')'`);
      }
      const after = this.next();
      if (after.kind === ',') continue;
      if (after.kind === ')') return values;
      throw new Error(`found ${describe(after)} in the values of "${key}", expected: ',' or ')'`);
    }
  }
  integer(key) {
    const t = this.nextWord();
    if (t.kind !== 'id') throw new Error(`found ${describe(t)} after '>' or '<' for "${key}", expected: an integer`);
    if (!/^[+-]?\d+$/.test(t.text)) throw new Error(`"${t.text}" compared with "${key}" is not an integer, as '>' and '<' require`);
    return Number(t.text);
  }
}

/**
 * Parses a label selector into a predicate over a labels object. Throws an
 * Error naming the part it could not understand.
 */
export function labelSelector(text) {
  const requirements = new Parser(text).parse();
  return (labels) =>
    requirements.every((r) => {
      const has = Object.hasOwn(labels, r.key);
      const value = has ? labels[r.key] : undefined;
      switch (r.op) {
        case '=':
          return value === r.value;
        // As in Kubernetes: an absent key satisfies != and notin.
        case '!=':
          return value !== r.value;
        case 'in':
          return has && r.values.includes(value);
        case 'notin':
          return !has || !r.values.includes(value);
        case 'exists':
          return has;
        case '!':
          return !has;
        case '>':
          return has && /^[+-]?\d+$/.test(value) && Number(value) > r.value;
        case '<':
          return has && /^[+-]?\d+$/.test(value) && Number(value) < r.value;
        default:
          return false;
      }
    });
}
