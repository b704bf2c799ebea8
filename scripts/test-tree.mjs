// The tree `npm test` runs the suite from: a copy of the repository in a temporary directory, in
// which every TypeScript file has its JavaScript beside it (esbuild, the transform tsx applies on
// the fly, with the same settings and an inline source map naming the repository's file).
//
// Why: under `--import tsx`, Node 20 resolves and loads every module of a test process through
// loader hooks on a separate thread, one round trip per module. Importing the whole platform took
// ~2.2 s and ~3.3 s of CPU that way, against ~1.45 s and ~1.9 s compiled (source maps on), and the
// suite is bound by the CPU of a 2-core machine. Copying the tree and transforming its ~650 files
// takes ~2 s once per run.
//
// The copy holds everything the tests read by path (deck, docs, fixtures, package.json) and the
// TypeScript sources too, so a child process a test starts with `--import tsx …/main.ts` still runs
// (its imports find the JavaScript). `node_modules`, `dist` and `test-output` are links to the
// repository's own: the built console and the reliability figures stay where they always were.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { transform } from 'esbuild';

/** Top-level entries linked, not copied. */
const LINKED = ['node_modules', 'dist', 'test-output'];
/** Top-level entries left out: version control, builds kept aside, data and results of local runs. */
const LEFT_OUT = /^(?:\.git|\.data|coverage|dist-.*)$/;
/** Directories whose TypeScript the tests load (the console's is bundled by its own build). */
const SOURCE_DIRS = ['services', 'domains', 'workers', 'plugins', 'test', 'bench', 'scripts'];

/** Builds the tree and returns its path; `removeTestTree` deletes it. */
export async function buildTestTree(root) {
  const tree = mkdtempSync(join(tmpdir(), 'ai-gateway-test-tree-'));
  mkdirSync(join(root, 'test-output'), { recursive: true });
  for (const entry of readdirSync(root)) {
    if (LEFT_OUT.test(entry)) continue;
    if (LINKED.includes(entry)) continue;
    cpSync(join(root, entry), join(tree, entry), { recursive: true, filter: (src) => !src.includes('/node_modules') });
  }
  for (const entry of LINKED) if (existsSync(join(root, entry))) symlinkSync(join(root, entry), join(tree, entry));

  const tsconfigRaw = readFileSync(join(root, 'tsconfig.json'), 'utf8');
  const files = SOURCE_DIRS.flatMap((dir) => typeScriptFiles(tree, dir));
  await Promise.all(
    files.map(async (file) => {
      const source = join(root, file);
      const { code } = await transform(readFileSync(join(tree, file), 'utf8'), { loader: 'ts', format: 'esm', platform: 'node', target: 'node20', sourcemap: 'inline', sourcefile: source, tsconfigRaw });
      writeFileSync(join(tree, file.replace(/\.ts$/, '.js')), code);
    }),
  );
  return tree;
}

export function removeTestTree(tree) {
  rmSync(tree, { recursive: true, force: true });
}

function typeScriptFiles(tree, dir) {
  if (!existsSync(join(tree, dir))) return [];
  return readdirSync(join(tree, dir), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts'))
    .map((entry) => relative(tree, join(entry.parentPath ?? entry.path, entry.name)));
}
