import { readFileSync } from 'node:fs';
import test from 'ava';
import { baseConfigShape } from '../services/kit/config.js';

// "Every setting is documented": a setting added to the kit's config without a README entry fails here.
test('every configuration variable appears in README.md', (t) => {
  const readme = readFileSync('README.md', 'utf8');
  const missing = Object.keys(baseConfigShape).filter((name) => {
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
