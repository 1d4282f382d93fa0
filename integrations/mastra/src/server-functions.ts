/**
 * Pooler mode's server functions: each hot lease statement sent as a call of the table's
 * plpgsql function (migration 0005, or a later revision that replaces its bodies), whose plan
 * the server keeps per session, instead of a plain statement the server parses and plans on
 * every call (a pooler leaves no named prepared statement usable). The calls are the ones the
 * Python pooler mode sends, from the exported catalogue (`functions` in catalogue.json).
 *
 * Every call names its function in full, `"schema"."<table>_acquire"(...)`, in the schema the
 * provider resolved for the table (schema-resolve.ts, which also says whether the functions
 * exist), each argument cast to its `pg_catalog` type, so neither a session's `search_path`
 * nor a look-alike overload can choose another function. When the functions are missing (a
 * database before 0005, or they were dropped while in use) the provider's plain statements,
 * qualified by the same schema, go instead, with one process warning
 * (`SQL_LEASE_POOLER_PLAIN`), as the Python provider logs once.
 */

import { catalogue, quoteIdent, type StatementName, type Statements } from './catalogue.js';
import { LeaseDatabaseError } from './errors.js';

/** SQL types as `pg_catalog` names them (what a cast or a signature may name in full). */
const CATALOG_TYPES: Record<string, string> = { bigint: 'int8', integer: 'int4', boolean: 'bool' };

/** `type` (as the catalogue names it) in full: `pg_catalog.int8`, `pg_catalog.bytea[]`. */
export function catalogType(type: string): string {
  const array = type.endsWith('[]');
  const base = array ? type.slice(0, -2) : type;
  return `pg_catalog.${CATALOG_TYPES[base] ?? base}${array ? '[]' : ''}`;
}

export class ServerFunctions {
  readonly #table: string;
  /** The provider's (qualified) statement text -> its call; empty while plain. */
  #calls = new Map<string, string>();
  #warned = false;

  constructor(table: string) {
    this.#table = table;
  }

  /**
   * Once the table's schema `home` is resolved: call the functions for `statements` (as built
   * for `home`) when `present`, else warn once and leave them plain.
   */
  use(statements: Statements, home: string, present: boolean): void {
    if (!present) {
      this.#calls = new Map();
      const acquire = this.#name(catalogue.functions.acquire?.name ?? '{table_name}_acquire');
      this.#warn(`the function ${quoteIdent(home)}.${quoteIdent(acquire)} does not exist`);
      return;
    }
    const calls = new Map<string, string>();
    for (const name of Object.keys(catalogue.functions) as StatementName[]) {
      const f = catalogue.functions[name];
      if (f === undefined) continue;
      const qualified = `${quoteIdent(home)}.${quoteIdent(this.#name(f.name))}`;
      const typed = f.call.replace(/\$(\d+)(?!\d|::)/g, (whole, n: string) => {
        const type = f.arguments[Number(n) - 1];
        return type === undefined ? whole : `${whole}::${catalogType(type)}`;
      });
      calls.set(statements[name], typed.replace('{function}', qualified));
    }
    this.#calls = calls;
  }

  /** True while the calls go to the server functions (false before `use` and once found missing). */
  get calling(): boolean {
    return this.#calls.size > 0;
  }

  /** The call to send for the provider's statement `text`, or undefined (send it as it is). */
  call(text: string): string | undefined {
    return this.#calls.get(text);
  }

  #name(template: string): string {
    return template.replaceAll('{table_name}', this.#table);
  }

  /**
   * After `error` for `sent`: true when `sent` was a call of a function that does not exist
   * (undefined_function: nothing ran, so the plain text may go now); every later call goes plain.
   */
  fallBack(sent: string, error: unknown): boolean {
    if (!(error instanceof LeaseDatabaseError) || error.sqlState !== '42883') return false;
    if (![...this.#calls.values()].includes(sent)) return false;
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
