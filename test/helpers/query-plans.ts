import type { ExecutionContext } from 'ava';
import type { Knex } from 'knex';

/** Index suites: bulk data, ANALYZE, then the plans of the queries the stores really send. No timing. */

export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

export async function batchInsert(knex: Knex, table: string, rows: Record<string, unknown>[]): Promise<void> {
  for (let i = 0; i < rows.length; i += 1000) await knex(table).insert(rows.slice(i, i + 1000));
}

/**
 * ANALYZE of the current schema's tables only: a bare ANALYZE reads every schema of the shared
 * database (every other test file's too), which at a busy moment ran past the statement timeout.
 */
export async function analyzeOwnTables(knex: Knex): Promise<void> {
  const tables: string[] = await knex('pg_tables').where({ schemaname: knex.raw('current_schema()') }).pluck('tablename');
  for (const table of tables) await knex.raw('analyze ??', [table]);
}

/** Every node of the plan of `sql` (knex's `?` or pg's `$n` placeholders). */
export async function explainSql(knex: Knex, sql: string, bindings: readonly unknown[]): Promise<PlanNode[]> {
  const result = await knex.raw(`explain (format json) ${sql.replace(/\$(\d+)/g, '?')}`, bindings as never);
  return nodes((result.rows[0]['QUERY PLAN'] as { Plan: PlanNode }[])[0]!.Plan);
}

export function explainQuery(knex: Knex, query: Knex.QueryBuilder): Promise<PlanNode[]> {
  const { sql, bindings } = query.toSQL().toNative();
  return explainSql(knex, sql, bindings);
}

/** No sequential scan, and each table read through one of the indexes named for it. */
export function assertIndexBacked(t: ExecutionContext, all: PlanNode[], tables: Record<string, string[]>): void {
  const summary = all.map((n) => `${n['Node Type']}${n['Relation Name'] ? ` on ${n['Relation Name']}` : ''}${n['Index Name'] ? ` using ${n['Index Name']}` : ''}`).join(' | ');
  t.log(summary);
  t.false(all.some((n) => n['Node Type'] === 'Seq Scan'), `no sequential scan: ${summary}`);
  for (const [table, indexes] of Object.entries(tables)) {
    t.true(
      all.some((n) => /Index/.test(n['Node Type']) && indexes.includes(n['Index Name'] ?? '')),
      `${table} read through one of ${indexes.join(', ')}: ${summary}`,
    );
  }
}
