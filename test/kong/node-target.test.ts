import { readFileSync } from 'node:fs';
import test from 'ava';

// Static: the Node.js version Kong runs the plugin servers with is named once in kong/README.md;
// the bundle's esbuild target and the Kong image's node binary must be that same major version.
const read = (path: string) => readFileSync(path, 'utf8');

test('kong/README.md names the Node.js version of the plugin servers, and the bundle targets it', (t) => {
  const named = /plugin servers run on Node\.js (\d+)\b/.exec(read('kong/README.md'))?.[1];
  t.truthy(named, 'kong/README.md says "The plugin servers run on Node.js <major>"');
  const targets = [...read('kong/build.mjs').matchAll(/target:\s*'node(\d+)'/g)].map((m) => m[1]);
  t.deepEqual(targets, [named]);
});

test("the Kong image copies in the node binary of the version kong/README.md names", (t) => {
  const named = /plugin servers run on Node\.js (\d+)\b/.exec(read('kong/README.md'))?.[1];
  const kongStage = read('deploy/Dockerfile').split(/^FROM /m).find((stage) => stage.startsWith('kong:'));
  t.truthy(kongStage, 'deploy/Dockerfile has a kong stage');
  const copied = /COPY --from=node:(\d+)[\w.-]* \/usr\/local\/bin\/node \/usr\/bin\/node/.exec(kongStage!)?.[1];
  t.is(copied, named);
});
