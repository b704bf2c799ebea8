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
