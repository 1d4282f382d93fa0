/**
 * The schema of the leases table when none is configured, resolved once per provider.
 *
 * Statements name every relation in full (a temp table `leases`, or a `search_path` another
 * client left on a pooled session, must not change which table they use), so the schema the
 * Python library would use by default is looked up once, on first use: the session's
 * `current_schema()`. Behind a pooler the session may carry another client's `SET
 * search_path`, so there it is read under the search path the role and database configure
 * (`pg_settings.reset_val`), set for that one query.
 */

import { LeaseSchemaError } from './errors.js';
import type { Executor } from './execute.js';

const DIRECT = 'SELECT pg_catalog.current_schema()';
const POOLED =
  "SELECT pg_catalog.set_config('search_path', s.reset_val, true) FROM pg_catalog.pg_settings AS s " +
  "WHERE s.name OPERATOR(pg_catalog.=) 'search_path'; SELECT pg_catalog.current_schema()";

/** The configured schema, else the one the role's default search path creates tables in. */
export async function resolveSchema(run: Executor, pooled: boolean, where: string): Promise<string> {
  const rows = await run.run('resolveSchema', false, pooled ? POOLED : DIRECT, []);
  const schema = rows[0]?.[0];
  if (typeof schema !== 'string' || schema === '') {
    throw new LeaseSchemaError(
      `resolveSchema: the default search path of ${where} names no schema that exists; pass the leases table's \`schema\``,
      { operation: 'resolveSchema' },
    );
  }
  return schema;
}
