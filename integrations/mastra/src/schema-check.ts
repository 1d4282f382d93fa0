/**
 * The start-up check of `PostgresPubSub`: the event tables of revision 0003 are there, with the
 * columns the statements use and their insert trigger; else a `LeaseSchemaError` naming the
 * revision the database is at and the command that migrates it.
 */

import { catalogue } from './catalogue.js';
import { LeaseSchemaError, PIP_INSTALL_CLI } from './errors.js';
import { EVENTS_REVISION, type EventStatements } from './events-sql.js';
import type { Executor, Row } from './execute.js';

export interface SchemaTarget {
  run: Executor;
  sql: EventStatements;
  table: string;
  schema: string | undefined;
  where: string;
}

/** Resolve when the event tables are usable; throw `LeaseSchemaError` (saying what to run) if not. */
export async function checkEventSchema(target: SchemaTarget): Promise<void> {
  let rows: Row[];
  try {
    rows = await target.run.run('ready', false, target.sql.probe, []);
  } catch (error) {
    if (!(error instanceof LeaseSchemaError)) throw error;
    throw await schemaError(target, 'are missing or out of date', error);
  }
  if (Number(rows[0]?.[1]) !== 1) throw await schemaError(target, 'lack their insert trigger');
}

async function schemaError(target: SchemaTarget, problem: string, cause?: LeaseSchemaError): Promise<LeaseSchemaError> {
  let at = 'has no sql_lease migrations for this table';
  try {
    const rows = await target.run.run('ready', false, target.sql.version, []);
    if (rows[0] !== undefined) at = `is at revision ${String(rows[0][0])}`;
  } catch {
    // no version table: nothing migrated
  }
  const flags = [
    target.table === catalogue.naming.default_table ? '' : ` --table ${target.table}`,
    target.schema === undefined ? '' : ` --schema ${target.schema}`,
  ].join('');
  return new LeaseSchemaError(
    `ready: the event tables of ${target.sql.qualified.events} ${problem} in ${target.where}, which ${at}; ` +
      `PostgresPubSub needs revision ${EVENTS_REVISION} of sql_lease's migrations: run ` +
      `\`sql-lease migrate --url ...${flags}\` (${PIP_INSTALL_CLI}) or \`alembic upgrade head\``,
    { operation: 'ready', sqlState: cause?.sqlState, cause },
  );
}
