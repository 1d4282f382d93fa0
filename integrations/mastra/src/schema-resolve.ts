/**
 * Where the leases table lives when no schema is configured (and, behind a pooler, whether its
 * server functions are there), looked up once per provider.
 *
 * Statements name every relation in full (a temp table `leases`, or a `search_path` another
 * client left on a pooled session, must not change which table they use), so the table is
 * looked up once, on first use: the first schema of the search path holding such a table, as
 * PostgreSQL finds an unqualified name, except that a temporary table never counts. Behind a
 * pooler the session may carry another client's `SET search_path`, so there the search path is
 * first set, for that one query, to the one the session started with (`pg_settings.reset_val`:
 * the role's and database's). A configured schema is checked the same way behind a pooler (the
 * one lookup also says whether the functions exist); directly it needs no lookup at all.
 */

import { catalogue, quoteIdent } from './catalogue.js';
import { LeaseSchemaError } from './errors.js';
import type { Executor } from './execute.js';
import { catalogType } from './server-functions.js';

const STARTING_PATH =
  "SELECT pg_catalog.set_config('search_path', s.reset_val, true) FROM pg_catalog.pg_settings AS s " +
  "WHERE s.name OPERATOR(pg_catalog.=) 'search_path';\n";

/**
 * `$1` the table, `$2` its acquire function's signature (without its schema), `$3` the schema
 * given or NULL: the table's schema and whether the function is there.
 */
const HOME = `SELECT n.nspname::pg_catalog.text,
  pg_catalog.to_regprocedure(pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) $2::pg_catalog.text) IS NOT NULL
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.relname OPERATOR(pg_catalog.=) $1::pg_catalog.name
  AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog."char"[])
  AND c.relpersistence OPERATOR(pg_catalog.<>) 't'::pg_catalog."char"
  AND CASE WHEN $3::pg_catalog.text IS NULL
    THEN n.nspname OPERATOR(pg_catalog.=) ANY (pg_catalog.current_schemas(false))
    ELSE n.nspname OPERATOR(pg_catalog.=) $3::pg_catalog.name END
ORDER BY pg_catalog.array_position(pg_catalog.current_schemas(false), n.nspname) NULLS FIRST
LIMIT 1`;

/** Where the leases table is, and whether pooler mode's server functions are there. */
export interface TableHome {
  schema: string;
  functions: boolean;
}

export interface ResolveOptions {
  table: string;
  /** The configured schema, else undefined (the search path decides). */
  schema: string | undefined;
  /** Behind a pooler: look up under the session's starting search path. */
  pooled: boolean;
  where: string;
}

/** The table's schema (the configured one, checked, else the search path's) and its functions. */
export async function resolveHome(run: Executor, options: ResolveOptions): Promise<TableHome> {
  const { table, schema } = options;
  const acquire = catalogue.functions.acquire;
  if (acquire === undefined) throw new Error('catalogue.json has no acquire function');
  const signature = `${quoteIdent(acquire.name.replaceAll('{table_name}', table))}(${acquire.arguments.map(catalogType).join(', ')})`;
  const text = (options.pooled ? STARTING_PATH : '') + HOME;
  const rows = await run.run('resolveSchema', false, text, [table, signature, schema ?? null]);
  const row = rows[0];
  if (row === undefined || typeof row[0] !== 'string') {
    const at = schema === undefined ? 'in any schema of the search path' : `in schema ${quoteIdent(schema)}`;
    throw new LeaseSchemaError(
      `resolveSchema: the leases table ${quoteIdent(table)} is not ${at} of ${options.where}: apply the migrations ` +
        'to this database (`sql-lease migrate --url ...`), or pass the schema it is in',
      { operation: 'resolveSchema', sqlState: '42P01' },
    );
  }
  return { schema: row[0], functions: row[1] === true };
}
