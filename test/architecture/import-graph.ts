import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import ts from 'typescript';

/**
 * The platform's import graph as TypeScript sees it: every import, re-export and dynamic import()
 * of the source folders (tests, benchmarks and scripts excluded), with relative specifiers resolved
 * to repository files. The boundary rules in boundaries.test.ts are checked over it.
 */
export interface ImportEdge {
  from: string;
  /** Repository path of the imported file, or the bare package name (`zod`, `node:fs`). */
  to: string;
  external: boolean;
  /** `import type` / `export type`: erased at run time. */
  typeOnly: boolean;
  /** `await import(...)`: loaded on use, not with the importer. */
  dynamic: boolean;
}

const ROOTS = ['services', 'domains', 'workers', 'plugins'];

export function sourceFiles(root: string): string[] {
  const listed = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', ...ROOTS], { cwd: root, encoding: 'utf8' });
  return listed
    .split('\n')
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && !f.endsWith('.test.ts'))
    .filter((f) => existsSync(join(root, f)));
}

function resolveSpecifier(root: string, from: string, specifier: string): string {
  const base = normalize(join(dirname(from), specifier));
  const candidates = [base.replace(/\.js$/, '.ts'), base.replace(/\.mjs$/, '.mts'), base, `${base}.ts`, join(base, 'index.ts')];
  return candidates.find((c) => existsSync(join(root, c))) ?? base;
}

export function importGraph(root: string, files = sourceFiles(root)): ImportEdge[] {
  const edges: ImportEdge[] = [];
  for (const file of files) {
    const source = ts.createSourceFile(file, readFileSync(join(root, file), 'utf8'), ts.ScriptTarget.Latest, false);
    const add = (specifier: string, typeOnly: boolean, dynamic: boolean) => {
      const external = !specifier.startsWith('.');
      edges.push({ from: file, to: external ? specifier : resolveSpecifier(root, file, specifier), external, typeOnly, dynamic });
    };
    const visit = (node: ts.Node) => {
      if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
        const clause = node.importClause;
        const typeOnly = !!clause && (clause.isTypeOnly || (!clause.name && !!clause.namedBindings && ts.isNamedImports(clause.namedBindings) && clause.namedBindings.elements.length > 0 && clause.namedBindings.elements.every((e) => e.isTypeOnly)));
        add(node.moduleSpecifier.text, typeOnly, false);
      } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
        add(node.moduleSpecifier.text, node.isTypeOnly, false);
      } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] && ts.isStringLiteral(node.arguments[0])) {
        add(node.arguments[0].text, false, true);
      } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
        add(node.argument.literal.text, true, false);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return edges;
}

/** Which unit a file belongs to: the kit, a service, the platform, a domain, a worker, a plugin. */
export interface Unit {
  kind: 'kit' | 'service' | 'platform' | 'domain' | 'worker' | 'plugin' | 'plugin-core' | 'outside';
  name: string;
}

export function unitOf(file: string): Unit {
  const [top, name] = file.split('/');
  if (top === 'services' && name === 'kit') return { kind: 'kit', name: 'kit' };
  if (top === 'services' && name === 'platform') return { kind: 'platform', name: 'platform' };
  if (top === 'services' && name) return { kind: 'service', name };
  if (top === 'domains' && name) return { kind: 'domain', name };
  if (top === 'workers' && name) return { kind: 'worker', name };
  if (top === 'plugins' && name === 'core') return { kind: 'plugin-core', name: 'core' };
  if (top === 'plugins' && name) return { kind: 'plugin', name };
  return { kind: 'outside', name: top ?? file };
}

export const KIT_ENTRIES: Record<string, string> = {
  'services/kit/index.ts': 'kit',
  'services/kit/core/index.ts': 'kit/core',
  'services/kit/settings/index.ts': 'kit/settings',
  'services/kit/http/index.ts': 'kit/http',
  'services/kit/data/index.ts': 'kit/data',
  'services/kit/identity/index.ts': 'kit/identity',
};

/** The files another unit may import: the kit's entry points, a unit's index.ts, a service's definition. */
export function isEntry(file: string): boolean {
  if (file in KIT_ENTRIES) return true;
  const unit = unitOf(file);
  const root = relative('.', file).split('/').slice(0, 2).join('/');
  if (unit.kind === 'service') return file === `${root}/service.ts`;
  return file === `${root}/index.ts`;
}

/**
 * A process entry (a service's or worker's `main.ts`, which runs it alone) composes a process as
 * `npm start` does, so it may also import the platform's standalone start (its production refusals
 * and one-line start failures); nothing else below the platform may.
 */
export const STANDALONE_START = 'services/platform/standalone.ts';
export const isStandaloneStart = (edge: ImportEdge) => /^(services|workers)\/[^/]+\/main\.ts$/.test(edge.from) && edge.to === STANDALONE_START;

export const sameUnit = (a: Unit, b: Unit) => a.kind === b.kind && a.name === b.name;
