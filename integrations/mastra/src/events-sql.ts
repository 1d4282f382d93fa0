/**
 * The event tables' names and every statement `PostgresPubSub` runs on them, built once per
 * leases table.
 *
 * The tables come from revision 0003 of sql_lease's Alembic migrations (the one source of the
 * schema); their names derive from the leases table's as `sql_lease._migrating.event_names` derives
 * them, and `EXPECTED_COLUMNS` is what this package relies on. The drift test migrates a
 * database and compares it with both.
 *
 * Every object is named in full: relations schema-qualified (the schema resolved once when
 * none is configured), functions, types and operators from `pg_catalog`, so that no
 * look-alike on the search path and no temp table can change what a statement does; and
 * `created_at` is read as epoch milliseconds, so no session setting changes it.
 *
 * Ordering: the insert trigger takes the topic's row lock in `<t>_event_topics` before it
 * draws the event's `id`, so the events of one topic commit in `id` order. A reader that has
 * seen `id` N of a topic therefore never later finds a smaller one: `id` is a safe cursor.
 */

import { createHash } from 'node:crypto';

import { quoteIdent } from './catalogue.js';

/** The migration that creates the event tables. */
export const EVENTS_REVISION = '0003';

export interface EventNames {
  events: string;
  topics: string;
  groups: string;
  claims: string;
  idSequence: string;
  stampFunction: string;
  channel: string;
}

/** The names revision 0003 gives the event objects of `table` (as the Python side does). */
export function eventNames(table: string, schema?: string): EventNames {
  let channel = schema ? `sql_lease_events:${schema}.${table}` : `sql_lease_events:${table}`;
  if (Buffer.byteLength(channel) > 63) {
    channel = 'sql_lease_events:' + createHash('sha1').update(channel).digest('hex');
  }
  return {
    events: `${table}_events`,
    topics: `${table}_event_topics`,
    groups: `${table}_event_groups`,
    claims: `${table}_event_claims`,
    idSequence: `${table}_events_id_seq`,
    stampFunction: `${table}_events_stamp`,
    channel,
  };
}

/** Columns (name → PostgreSQL type as `format_type` prints it) the statements below use. */
export const EXPECTED_COLUMNS: Record<keyof Pick<EventNames, 'events' | 'topics' | 'groups' | 'claims'>, Record<string, string>> = {
  events: { id: 'bigint', topic: 'text', seq: 'bigint', payload: 'json', created_at: 'timestamp with time zone' },
  topics: { topic: 'text', next_seq: 'bigint', last_at: 'timestamp with time zone' },
  groups: { group_name: 'text', topic: 'text', next_id: 'bigint', created_at: 'timestamp with time zone' },
  claims: {
    group_name: 'text',
    topic: 'text',
    event_id: 'bigint',
    consumer: 'text',
    visible_at: 'timestamp with time zone',
    attempts: 'integer',
  },
};

/** Operators named in full: no look-alike on the search path can take a statement over. */
export const OP = {
  eq: 'OPERATOR(pg_catalog.=)',
  ne: 'OPERATOR(pg_catalog.<>)',
  lt: 'OPERATOR(pg_catalog.<)',
  le: 'OPERATOR(pg_catalog.<=)',
  gt: 'OPERATOR(pg_catalog.>)',
  ge: 'OPERATOR(pg_catalog.>=)',
  plus: 'OPERATOR(pg_catalog.+)',
  minus: 'OPERATOR(pg_catalog.-)',
} as const;

export interface EventStatements {
  names: EventNames;
  /** Qualified, quoted table names. */
  qualified: Record<'events' | 'topics' | 'groups' | 'claims' | 'versions', string>;
  /** $1 topic, $2 payload (JSON text) → id, seq. */
  publish: string;
  /** $1 topic → the newest id of the topic (0 when none). */
  head: string;
  /** $1 topic, $2 after id, $3 limit → id, seq, payload, created_at in id order. */
  fetch: string;
  /** $1 topic, $2 from seq → the events from that index, plus the topic's newest event. */
  replay: string;
  /** $1 topic, $2 from seq → id, seq, payload, created_at in seq order. */
  history: string;
  /** $1 group, $2 topic, $3 start at the head (boolean): creates the group if new. */
  joinGroup: string;
  /**
   * $1 group, $2 topic, $3 consumer, $4 limit, $5 ack timeout ms, $6 max attempts → events
   * claimed for $3 (id, seq, payload, created_at, attempts, parked): due claims of events
   * delivered $6 times already are parked instead (`visible_at` infinity; `parked` true).
   */
  claim: string;
  /** $1 group, $2 topic, $3 event id, $4 consumer → the claim ended (a row) or not. */
  ack: string;
  /**
   * $1 group, $2 topic, $3 event id, $4 consumer, $5 delay ms, $6 max attempts → the claim made
   * due again, or parked (`visible_at` infinity) when it was the last attempt; → parked or not.
   */
  nack: string;
  /** $1 topic: events, claims, groups and the topic's counter. */
  clearTopic: string;
  /** $1 retention ms, $2 batch → events deleted (and their claims). */
  cleanupEvents: string;
  /** $1 retention ms → idle topic counters deleted. */
  cleanupTopics: string;
  /** Fails with an undefined-table/column error unless the tables are as expected; → trigger count. */
  probe: string;
  /** The version table's revision (run only after `probe` passed). */
  version: string;
}

/**
 * The statements on the event tables of `table`: names (the channel) from the configured
 * `schema`, relations qualified with `qualifyWith` (the resolved schema when none is
 * configured: schema-resolve.ts).
 */
export function buildEventStatements(
  table: string,
  schema: string | undefined,
  versionTable: string,
  qualifyWith: string | undefined = schema,
): EventStatements {
  const names = eventNames(table, schema);
  const prefix = qualifyWith === undefined ? '' : `${quoteIdent(qualifyWith)}.`;
  const q = (name: string): string => prefix + quoteIdent(name);
  const ev = q(names.events);
  const tp = q(names.topics);
  const gr = q(names.groups);
  const cl = q(names.claims);
  const { eq, gt, ge, lt, le, ne, plus, minus } = OP;
  const text = '::pg_catalog.text';
  const int8 = '::pg_catalog.int8';
  const now = 'pg_catalog.clock_timestamp()';
  const ms = (param: string): string => `(${param}${int8} OPERATOR(pg_catalog.*) '1 millisecond'::pg_catalog.interval)`;
  // (OPERATOR(...) forms share one precedence, left to right: comparisons parenthesise.)
  // created_at as epoch milliseconds: a number, whatever the session's DateStyle or TimeZone.
  const cols = `e.id, e.seq, e.payload${text}, pg_catalog.floor(EXTRACT(EPOCH FROM e.created_at) OPERATOR(pg_catalog.*) 1000)${int8}`;
  const probeOf = (qualified: string, columns: Record<string, string>): string =>
    `(SELECT pg_catalog.count(*) FROM (SELECT ${Object.keys(columns).join(', ')} FROM ${qualified} LIMIT 0) AS x)`;
  const literal = (value: string): string => `'${value.replaceAll("'", "''")}'`;
  const group = `group_name ${eq} $1${text} AND topic ${eq} $2${text}`;
  // The group's due claims ($6: max attempts), locked one by one, skipping those another takes.
  const dueClaims = (attempts: string): string =>
    `(SELECT d.event_id FROM ${cl} AS d WHERE d.group_name ${eq} $1${text} AND d.topic ${eq} $2${text} ` +
    `AND d.visible_at ${le} ${now} AND d.attempts ${attempts} $6::pg_catalog.int4 AND EXISTS (SELECT 1 FROM g) ` +
    `ORDER BY d.event_id LIMIT $4${int8} FOR UPDATE SKIP LOCKED) AS pick`;
  return {
    names,
    qualified: { events: ev, topics: tp, groups: gr, claims: cl, versions: q(versionTable) },
    publish: `INSERT INTO ${ev} (topic, payload) VALUES ($1${text}, $2::pg_catalog.json) RETURNING id, seq`,
    head: `SELECT COALESCE(pg_catalog.max(id), 0) FROM ${ev} WHERE topic ${eq} $1${text}`,
    fetch: `SELECT ${cols} FROM ${ev} AS e WHERE e.topic ${eq} $1${text} AND e.id ${gt} $2${int8} ORDER BY e.id LIMIT $3${int8}`,
    replay:
      `SELECT ${cols} FROM ${ev} AS e WHERE e.topic ${eq} $1${text} AND (e.seq ${ge} $2${int8} OR ` +
      `e.id ${eq} (SELECT pg_catalog.max(x.id) FROM ${ev} AS x WHERE x.topic ${eq} $1${text})) ORDER BY e.id`,
    history: `SELECT ${cols} FROM ${ev} AS e WHERE e.topic ${eq} $1${text} AND e.seq ${ge} $2${int8} ORDER BY e.seq`,
    joinGroup:
      `INSERT INTO ${gr} (group_name, topic, next_id) VALUES ($1${text}, $2${text}, CASE WHEN $3::pg_catalog.bool ` +
      `THEN (SELECT COALESCE(pg_catalog.max(e.id), 0) ${plus} 1 FROM ${ev} AS e WHERE e.topic ${eq} $2${text}) ELSE 0 END) ` +
      'ON CONFLICT (group_name, topic) DO NOTHING',
    // One statement: lock the group's cursor (members of a group claim one after another),
    // take the due claims of others (expired or nacked), park those delivered $6 times
    // already, and take the next unclaimed events.
    claim: `WITH g AS (
  SELECT next_id FROM ${gr} WHERE ${group} FOR UPDATE
), fresh AS (
  SELECT e.id FROM ${ev} AS e, g WHERE e.topic ${eq} $2${text} AND e.id ${ge} g.next_id ORDER BY e.id LIMIT $4${int8}
), moved AS (
  UPDATE ${gr} SET next_id = (SELECT pg_catalog.max(f.id) ${plus} 1 FROM fresh AS f)
  WHERE ${group} AND EXISTS (SELECT 1 FROM fresh)
), due AS (
  UPDATE ${cl} AS c SET consumer = $3${text}, attempts = c.attempts ${plus} 1, visible_at = ${now} ${plus} ${ms('$5')}
  FROM ${dueClaims(lt)}
  WHERE c.group_name ${eq} $1${text} AND c.topic ${eq} $2${text} AND c.event_id ${eq} pick.event_id
  RETURNING c.event_id, c.attempts, false AS parked
), parked AS (
  UPDATE ${cl} AS c SET visible_at = 'infinity'::pg_catalog.timestamptz
  FROM ${dueClaims(ge)}
  WHERE c.group_name ${eq} $1${text} AND c.topic ${eq} $2${text} AND c.event_id ${eq} pick.event_id
  RETURNING c.event_id, c.attempts, true AS parked
), taken AS (
  INSERT INTO ${cl} (group_name, topic, event_id, consumer, visible_at, attempts)
  SELECT $1${text}, $2${text}, f.id, $3${text}, ${now} ${plus} ${ms('$5')}, 1 FROM fresh AS f
  RETURNING event_id, attempts, false AS parked
)
SELECT ${cols}, x.attempts, x.parked FROM (SELECT * FROM due UNION ALL SELECT * FROM taken UNION ALL SELECT * FROM parked) AS x
JOIN ${ev} AS e ON e.id ${eq} x.event_id ORDER BY e.id`,
    ack: `DELETE FROM ${cl} WHERE ${group} AND event_id ${eq} $3${int8} AND consumer ${eq} $4${text} RETURNING event_id`,
    nack:
      `UPDATE ${cl} SET visible_at = CASE WHEN attempts ${ge} $6::pg_catalog.int4 THEN 'infinity'::pg_catalog.timestamptz ` +
      `ELSE ${now} ${plus} ${ms('$5')} END ` +
      `WHERE ${group} AND event_id ${eq} $3${int8} AND consumer ${eq} $4${text} ` +
      `RETURNING visible_at ${eq} 'infinity'::pg_catalog.timestamptz`,
    clearTopic: `WITH c AS (DELETE FROM ${cl} WHERE topic ${eq} $1${text}), g AS (DELETE FROM ${gr} WHERE topic ${eq} $1${text}),
t AS (DELETE FROM ${tp} WHERE topic ${eq} $1${text})
DELETE FROM ${ev} WHERE topic ${eq} $1${text}`,
    cleanupEvents: `WITH old AS (
  SELECT o.id FROM ${ev} AS o WHERE o.created_at ${lt} (${now} ${minus} ${ms('$1')})
  ORDER BY o.created_at LIMIT $2${int8}
), gone AS (
  DELETE FROM ${ev} AS e USING old WHERE e.id ${eq} old.id RETURNING e.id
), c AS (
  DELETE FROM ${cl} AS c USING gone WHERE c.event_id ${eq} gone.id
)
SELECT pg_catalog.count(*) FROM gone`,
    cleanupTopics:
      `WITH d AS (DELETE FROM ${tp} AS t WHERE t.last_at ${lt} (${now} ${minus} ${ms('$1')}) ` +
      `AND NOT EXISTS (SELECT 1 FROM ${ev} AS e WHERE e.topic ${eq} t.topic) RETURNING 1) SELECT pg_catalog.count(*) FROM d`,
    probe:
      `SELECT ${probeOf(ev, EXPECTED_COLUMNS.events)} ${plus} ${probeOf(tp, EXPECTED_COLUMNS.topics)} ${plus} ` +
      `${probeOf(gr, EXPECTED_COLUMNS.groups)} ${plus} ${probeOf(cl, EXPECTED_COLUMNS.claims)}, ` +
      `(SELECT pg_catalog.count(*) FROM pg_catalog.pg_trigger WHERE tgrelid ${eq} ${literal(ev)}::pg_catalog.regclass ` +
      `AND tgname ${eq} ${literal(names.stampFunction)}::pg_catalog.name AND tgenabled ${ne} 'D')`,
    version: `SELECT version_num FROM ${q(versionTable)}`,
  };
}
