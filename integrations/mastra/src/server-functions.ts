/**
 * Pooler mode's server functions: each hot lease statement sent as a call of the table's
 * plpgsql function (migration 0005, or a later revision that replaces its bodies), whose plan
 * the server keeps per session, instead of a plain statement the server parses and plans on
 * every call (a pooler leaves no named prepared statement usable). The calls are the ones the
 * Python pooler mode sends, from the exported catalogue (`functions` in catalogue.json).
 *
 * Every call names its function in full, `"schema"."<table>_acquire"(...)`, each argument cast
 * to its `pg_catalog` type, so neither a session's `search_path` nor a look-alike overload can
 * choose another function. A table given without a schema is looked up once, in the schemas of
 * the search path the server session started with, never in a temporary schema (so neither a
 * temporary table nor a `SET search_path` that another client left on a pooled server session
 * can capture it); until that succeeds nothing is cached and the call fails with
 * `LeaseSchemaError`. When the functions are missing (a database before 0005) the statements
 * go plain, also qualified by that schema, with one process warning (`SQL_LEASE_POOLER_PLAIN`),
 * as the Python provider logs once.
 */

import { buildStatements, catalogue, quoteIdent, type StatementName, type Statements } from './catalogue.js';
import { LeaseDatabaseError, LeaseSchemaError } from './errors.js';
import type { Row } from './execute.js';

/** SQL types as `pg_catalog` names them (what a cast or a signature may name in full). */
const CATALOG_TYPES: Record<string, string> = { bigint: 'int8', integer: 'int4', boolean: 'bool' };

function catalogType(type: string): string {
  const array = type.endsWith('[]');
  const base = array ? type.slice(0, -2) : type;
  return `pg_catalog.${CATALOG_TYPES[base] ?? base}${array ? '[]' : ''}`;
}

/**
 * Where the table lives, and whether its acquire function is there: `$1` the table, `$2` the
 * function's signature (without its schema), `$3` the schema given or NULL (then the first
 * schema of the search path holding such a table; temporary tables never count). The search
 * path is first set, for this transaction only, to the one the session started with (the
 * role's and database's): a `SET search_path` that another client of the pooler left on the
 * server session does not count either. Two statements: pooler mode sends one simple query.
 */
const HOME = `SELECT pg_catalog.set_config('search_path', s.reset_val, true) FROM pg_catalog.pg_settings s
WHERE s.name OPERATOR(pg_catalog.=) 'search_path';
SELECT n.nspname::pg_catalog.text,
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

/** Runs one statement for the resolution (the executor's own path, within the call's deadline). */
export type Query = (text: string, values: unknown[]) => Promise<Row[]>;

export class ServerFunctions {
  readonly #table: string;
  readonly #schema: string | undefined;
  /** The provider's statement texts (as built for the names it was given) and their names. */
  readonly #names = new Map<string, StatementName>();
  /** After resolution: the provider's text -> the call, or the qualified plain statement. */
  #calls: Map<string, string> | undefined;
  #plain: Statements | undefined;
  #home: string | undefined;
  #resolving: Promise<void> | undefined;
  #warned = false;

  /** For the leases table `table` in `schema` (undefined: the one the search path finds). */
  constructor(table: string, schema: string | undefined) {
    this.#table = table;
    this.#schema = schema;
    const given = buildStatements(table, schema);
    for (const name of Object.keys(catalogue.functions) as StatementName[]) this.#names.set(given[name], name);
  }

  /** True when `text` is one of the statements this object replaces. */
  covers(text: string): boolean {
    return this.#names.has(text);
  }

  /** True once the table's schema is known (`text` may be called). */
  get ready(): boolean {
    return this.#plain !== undefined;
  }

  /** The schema the calls name (undefined until resolved). */
  get home(): string | undefined {
    return this.#home;
  }

  /** True while the calls go to the server functions (false once they were found missing). */
  get calling(): boolean {
    return this.#calls !== undefined && this.#calls.size > 0;
  }

  /** Find the table's schema and whether the functions are there, once (concurrent callers share it). */
  resolve(query: Query, operation: string): Promise<void> {
    this.#resolving ??= this.#lookUp(query, operation).finally(() => {
      this.#resolving = undefined;
    });
    return this.#resolving;
  }

  async #lookUp(query: Query, operation: string): Promise<void> {
    if (this.ready) return;
    const acquire = catalogue.functions.acquire;
    if (acquire === undefined) throw new Error('catalogue.json has no acquire function');
    const signature = `${quoteIdent(this.#name(acquire.name))}(${acquire.arguments.map(catalogType).join(', ')})`;
    const rows = await query(HOME, [this.#table, signature, this.#schema ?? null]);
    const row = rows[0];
    if (row === undefined) {
      const where = this.#schema === undefined ? 'in any schema of the search path' : `in schema ${quoteIdent(this.#schema)}`;
      throw new LeaseSchemaError(
        `the leases table ${quoteIdent(this.#table)} is not ${where}: apply the migrations to this database ` +
          '(`sql-lease migrate --url ...`), or pass the schema it is in',
        { operation },
      );
    }
    const home = row[0] as string;
    this.#home = home;
    this.#plain = buildStatements(this.#table, home, this.#schema);
    this.#calls = row[1] === true ? this.#callTexts(home) : new Map();
    if (row[1] !== true) this.#warn('the function ' + `${quoteIdent(home)}.${signature} does not exist`);
  }

  #name(template: string): string {
    return template.replaceAll('{table_name}', this.#table);
  }

  #callTexts(home: string): Map<string, string> {
    const out = new Map<string, string>();
    for (const [text, name] of this.#names) {
      const f = catalogue.functions[name];
      if (f === undefined) continue;
      const qualified = `${quoteIdent(home)}.${quoteIdent(this.#name(f.name))}`;
      const typed = f.call.replace(/\$(\d+)(?!\d|::)/g, (whole, n: string) => {
        const type = f.arguments[Number(n) - 1];
        return type === undefined ? whole : `${whole}::${catalogType(type)}`;
      });
      out.set(text, typed.replace('{function}', qualified));
    }
    return out;
  }

  /** What to send for the provider's statement `text` (after `resolve`): its call, or its plain form. */
  text(text: string): string {
    const name = this.#names.get(text);
    if (name === undefined || this.#plain === undefined) return text;
    return this.#calls?.get(text) ?? this.#plain[name];
  }

  /**
   * After `error` for `sent`: true when `sent` was a call of a function that does not exist
   * (undefined_function: nothing ran, so the plain text may go now); every later call goes plain.
   */
  fallBack(sent: string, error: unknown): boolean {
    if (!(error instanceof LeaseDatabaseError) || error.sqlState !== '42883') return false;
    const calls = this.#calls;
    if (calls === undefined || ![...calls.values()].includes(sent)) return false;
    this.#calls = new Map();
    this.#warn((error.cause as Error | undefined)?.message ?? error.message);
    return true;
  }

  #warn(why: string): void {
    if (this.#warned) return;
    this.#warned = true;
    process.emitWarning(
      `@sql-lease/mastra: the server functions of pooler mode are missing (${why}): sending plain statements, ` +
        'each planned on every call; apply the migrations to this database (revision 0005) and restart to use them',
      { code: 'SQL_LEASE_POOLER_PLAIN' },
    );
  }
}
