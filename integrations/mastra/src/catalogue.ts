/**
 * The statement catalogue, exported by the Python package (`sql-lease sql --json`) and
 * committed as `catalogue.json`: the SQL here is never written by hand. A test fails when the
 * committed copy differs from what the Python package prints now.
 *
 * `buildStatements(table, schema)` renders the templates for one leases table, exactly as the
 * Python provider builds them (quoted identifiers, `<table>_fence_seq`, the notify channel).
 */

import { createHash } from 'node:crypto';

import data from './catalogue.json' with { type: 'json' };

export interface CatalogueColumn {
  name: string;
  type: string;
}

export interface CatalogueStatement {
  sql: string;
  params: CatalogueColumn[];
  columns: CatalogueColumn[];
  rows: string;
}

export type StatementName =
  | 'acquire'
  | 'get_owner'
  | 'get_lease'
  | 'holder'
  | 'release'
  | 'renew'
  | 'transfer'
  | 'renew_many'
  | 'force_release'
  | 'list_live'
  | 'purge_batch'
  | 'want'
  | 'now'
  | 'count_acquire'
  | 'count_holders'
  | 'count_release'
  | 'count_renew'
  | 'count_transfer'
  | 'acquire_all'
  | 'ensure_rows'
  | 'release_all';

/** A statement pooler mode sends as a call of the table's plpgsql function (migration 0005). */
export interface CatalogueFunction {
  /** The function's unquoted name; `{table_name}` stands for the table's. */
  name: string;
  /** Its argument types, in order (its signature). */
  arguments: string[];
  /** The call; `{function}` stands for the quoted function name qualified by the table's schema. */
  call: string;
}

export interface Catalogue {
  format: number;
  dialect: string;
  naming: {
    default_table: string;
    identifier_pattern: string;
    identifier_max_length: number;
    channel_max_bytes: number;
  };
  limits: {
    max_name_bytes: number;
    max_ttl_ms: number;
    min_ttl_ms: number;
    /** The largest `limit` of a counting lease. */
    max_limit: number;
    /** The largest metadata, in bytes (a string counts as its UTF-8). */
    max_metadata_bytes: number;
    /** The most keys one all-or-none call takes. */
    max_keys: number;
  };
  /** Counting leases and metadata: how their rows look (see counting.ts). */
  counting: {
    /** The owner (hex) of a row holding a counting lease or a lease with metadata. */
    reserved_owner: string;
    holders: string;
    rows: string;
  };
  statements: Record<StatementName, CatalogueStatement>;
  functions: Partial<Record<StatementName, CatalogueFunction>>;
}

/** The format of the export this package understands. */
export const CATALOGUE_FORMAT = 1;

export const catalogue: Catalogue = data;

if (catalogue.format !== CATALOGUE_FORMAT || catalogue.dialect !== 'postgresql') {
  throw new Error(`catalogue.json has format ${catalogue.format}; this package reads format ${CATALOGUE_FORMAT}`);
}

export type Statements = Record<StatementName, string> & {
  /** The quoted, optionally schema-qualified table. */
  table: string;
  /** The LISTEN/NOTIFY channel of the table. */
  channel: string;
};

/** Quote an identifier that was validated as a plain SQL identifier. */
export function quoteIdent(name: string): string {
  return `"${name}"`;
}

/** The notify channel of a table, as the Python `sql_lease.schema.notify_channel` names it. */
export function notifyChannel(table: string, schema?: string): string {
  const name = schema ? `sql_lease:${schema}.${table}` : `sql_lease:${table}`;
  if (name.length <= catalogue.naming.channel_max_bytes) return name;
  return 'sql_lease:' + createHash('sha1').update(name).digest('hex');
}

/**
 * Render every statement for `schema.table` (names already validated). Relations are
 * qualified with `qualifyWith` (default `schema`: the resolved schema when none is configured,
 * schema-resolve.ts); the notify channel follows the configured `schema`, as Python names it.
 */
export function buildStatements(table: string, schema?: string, qualifyWith: string | undefined = schema): Statements {
  const prefix = qualifyWith === undefined ? '' : `${quoteIdent(qualifyWith)}.`;
  const qualified = prefix + quoteIdent(table);
  const sequence = prefix + quoteIdent(`${table}_fence_seq`);
  const channel = notifyChannel(table, schema);
  const out: Partial<Record<StatementName, string>> = {};
  for (const [name, statement] of Object.entries(catalogue.statements) as [StatementName, CatalogueStatement][]) {
    out[name] = statement.sql
      .replaceAll('{table}', qualified)
      .replaceAll('{fence_sequence}', sequence)
      .replaceAll('{channel}', channel);
  }
  return { ...(out as Record<StatementName, string>), table: qualified, channel };
}
