import { readdirSync, readFileSync } from 'node:fs';
import test from 'ava';
import { configShapes } from '../services/platform/config.js';

// "Every setting is documented": a setting added to any owner's config shape (the platform-wide one
// in the kit, or a service's or worker's own) without a README entry fails here.
test('every configuration variable of every owner appears in README.md', (t) => {
  const readme = readFileSync('README.md', 'utf8');
  const shapes = configShapes();
  t.true(shapes.some((s) => s.owner === 'gateway'), 'the edge declares its own shape');
  const missing = shapes.flatMap((s) => Object.keys(s.shape).map((name) => `${s.owner}: ${name}`)).filter((entry) => {
    const name = entry.slice(entry.indexOf(': ') + 2);
    if (readme.includes(`\`${name}\``)) return false;
    // Grouped rows such as `EDGE_RATE_LIMIT_FREE_PER_MINUTE` / `_PER_DAY` document the suffix form.
    const suffix = name.slice(name.lastIndexOf('_PER_'));
    return !(name.includes('_PER_') && readme.includes(`\`${suffix}\``) && readme.includes(`\`${name.slice(0, name.lastIndexOf('_PER_'))}_PER_MINUTE\``));
  });
  t.deepEqual(missing, []);
});

/** README's settings rows: each name in a row's first cell → the row's default cell, backticks removed. */
function readmeDefaults(readme: string): Map<string, string> {
  const defaults = new Map<string, string>();
  for (const line of readme.split('\n')) {
    const row = /^\| (`[^|]+) \| ([^|]*) \|/.exec(line);
    if (!row) continue;
    for (const name of row[1]!.matchAll(/`([A-Z0-9_]+)`/g)) defaults.set(name[1]!, row[2]!.replace(/`/g, '').trim());
  }
  return defaults;
}

const DURATION_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Whether README's default text says `value`, the default the setting's schema gives when it is unset. */
function saysDefault(text: string, value: unknown): boolean {
  if (typeof value === 'number') return Number(/^-?[\d.]+/.exec(text.replace(/[ ,_]/g, ''))?.[0]) === value;
  if (typeof value === 'boolean') return text.startsWith(String(value));
  if (typeof value === 'string') return text === value || text.startsWith(`${value} `) || (value === '' && /^\(?(empty|unset)/i.test(text));
  if (Array.isArray(value)) {
    if (value.length === 0) return /^\(?(empty|none)/i.test(text);
    const listed = text.split(/\s*,\s*/);
    if (value.every((v) => typeof v === 'number')) {
      return listed.length === value.length && listed.every((entry, i) => {
        const [, amount, unit] = /^([\d.]+)(ms|s|m|h)$/.exec(entry) ?? [];
        return amount !== undefined && Number(amount) * DURATION_MS[unit!]! === value[i];
      });
    }
    return value.every((v) => text.includes(String(v)));
  }
  return false;
}

// A default changed in code (or in README) without the other fails here. Settings whose default is
// derived at start (service URLs, the JWT issuer, secrets derived from MASTER_KEY) have none to compare.
test("every README default is the default the setting's schema gives", (t) => {
  const documented = readmeDefaults(readFileSync('README.md', 'utf8'));
  const wrong: string[] = [];
  let compared = 0;
  const seen = new Set<string>();
  for (const { shape } of configShapes()) {
    for (const [name, schema] of Object.entries(shape)) {
      const text = documented.get(name);
      if (seen.has(name) || text === undefined) continue;
      seen.add(name);
      const parsed = (schema as { safeParse(v: unknown): { success: boolean; data?: unknown } }).safeParse(undefined);
      if (!parsed.success || parsed.data === undefined) continue;
      compared++;
      if (!saysDefault(text, parsed.data)) wrong.push(`${name}: README says "${text}", the code ${JSON.stringify(parsed.data)}`);
    }
  }
  t.true(compared > 150, `compared ${compared} defaults`);
  t.deepEqual(wrong, []);
});

test('the README shows the two quickstart commands', (t) => {
  const readme = readFileSync('README.md', 'utf8');
  t.true(readme.includes('npm install && npm start'));
  t.true(readme.includes('npm test'));
});

// The repository stands on its own: its docs explain behaviour in place instead of pointing at
// documents a reader who cloned it does not have (the specification, work-tracking numbers).
test('README and docs cite no outside specification, shared folder or issue number', (t) => {
  const pages = ['README.md', 'kong/README.md', 'deploy/README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  const offending: string[] = [];
  for (const page of pages) {
    readFileSync(page, 'utf8')
      .split('\n')
      .forEach((line, index) => {
        if (/SPEC\.md|shape A|\.\.\/shared|\b[Ii]ssue #?\d+/.test(line)) offending.push(`${page}:${index + 1}: ${line.trim().slice(0, 80)}`);
      });
  }
  t.deepEqual(offending, []);
});
