/**
 * The event tables' names and every statement `PostgresPubSub` runs on them, built once per
 * leases table.
 *
 * The tables come from revision 0003 of sql_lease's Alembic migrations (the one source of the
 * schema); their names derive from the leases table's as `sql_lease._event_names` derives
 * them, and `EXPECTED_COLUMNS` is what this package relies on. The drift test migrates a
 * database and compares it with both.
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

export interface EventStatements {
  names: EventNames;
  /** Qualified, quoted table names. */
  qualified: Record<'events' | 'topics' | 'groups' | 'claims' | 'versions', string>;
  /** $1 topic, $2 payload (JSON text) → id, seq, created_at. */
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

export function buildEventStatements(table: string, schema: string | undefined, versionTable: string): EventStatements {
  const names = eventNames(table, schema);
  const prefix = schema === undefined ? '' : `${quoteIdent(schema)}.`;
  const q = (name: string): string => prefix + quoteIdent(name);
  const ev = q(names.events);
  const tp = q(names.topics);
  const gr = q(names.groups);
  const cl = q(names.claims);
  const cols = 'e.id, e.seq, e.payload::text, e.created_at';
  const probeOf = (qualified: string, columns: Record<string, string>): string =>
    `(SELECT count(*) FROM (SELECT ${Object.keys(columns).join(', ')} FROM ${qualified} LIMIT 0) AS x)`;
  const literal = (text: string): string => `'${text.replaceAll("'", "''")}'`;
  return {
    names,
    qualified: { events: ev, topics: tp, groups: gr, claims: cl, versions: q(versionTable) },
    publish: `INSERT INTO ${ev} (topic, payload) VALUES ($1, $2::json) RETURNING id, seq, created_at`,
    head: `SELECT coalesce(max(id), 0) FROM ${ev} WHERE topic = $1`,
    fetch: `SELECT ${cols} FROM ${ev} AS e WHERE e.topic = $1 AND e.id > $2::bigint ORDER BY e.id LIMIT $3`,
    replay:
      `SELECT ${cols} FROM ${ev} AS e WHERE e.topic = $1 AND (e.seq >= $2::bigint OR ` +
      `e.id = (SELECT max(id) FROM ${ev} WHERE topic = $1)) ORDER BY e.id`,
    history: `SELECT ${cols} FROM ${ev} AS e WHERE e.topic = $1 AND e.seq >= $2::bigint ORDER BY e.seq`,
    joinGroup:
      `INSERT INTO ${gr} (group_name, topic, next_id) VALUES ($1, $2, CASE WHEN $3::boolean ` +
      `THEN (SELECT coalesce(max(id), 0) + 1 FROM ${ev} WHERE topic = $2) ELSE 0 END) ` +
      'ON CONFLICT (group_name, topic) DO NOTHING',
    // One statement: lock the group's cursor (members of a group claim one after another),
    // take the due claims of others (expired or nacked) and the next unclaimed events.
    claim: `WITH g AS (
  SELECT next_id FROM ${gr} WHERE group_name = $1 AND topic = $2 FOR UPDATE
), fresh AS (
  SELECT e.id FROM ${ev} AS e, g WHERE e.topic = $2 AND e.id >= g.next_id ORDER BY e.id LIMIT $4
), moved AS (
  UPDATE ${gr} SET next_id = (SELECT max(id) + 1 FROM fresh)
  WHERE group_name = $1 AND topic = $2 AND EXISTS (SELECT 1 FROM fresh)
), due AS (
  UPDATE ${cl} AS c SET consumer = $3, attempts = c.attempts + 1,
    visible_at = clock_timestamp() + $5::bigint * interval '1 millisecond'
  WHERE (c.group_name, c.topic, c.event_id) IN (
    SELECT group_name, topic, event_id FROM ${cl}
    WHERE group_name = $1 AND topic = $2 AND visible_at <= clock_timestamp() AND attempts < $6::integer
      AND EXISTS (SELECT 1 FROM g)
    ORDER BY event_id LIMIT $4 FOR UPDATE SKIP LOCKED)
  RETURNING c.event_id, c.attempts, false AS parked
), parked AS (
  UPDATE ${cl} AS c SET visible_at = 'infinity'
  WHERE (c.group_name, c.topic, c.event_id) IN (
    SELECT group_name, topic, event_id FROM ${cl}
    WHERE group_name = $1 AND topic = $2 AND visible_at <= clock_timestamp() AND attempts >= $6::integer
      AND EXISTS (SELECT 1 FROM g)
    ORDER BY event_id LIMIT $4 FOR UPDATE SKIP LOCKED)
  RETURNING c.event_id, c.attempts, true AS parked
), taken AS (
  INSERT INTO ${cl} (group_name, topic, event_id, consumer, visible_at, attempts)
  SELECT $1, $2, id, $3, clock_timestamp() + $5::bigint * interval '1 millisecond', 1 FROM fresh
  RETURNING event_id, attempts, false AS parked
)
SELECT ${cols}, x.attempts, x.parked FROM (SELECT * FROM due UNION ALL SELECT * FROM taken UNION ALL SELECT * FROM parked) AS x
JOIN ${ev} AS e ON e.id = x.event_id ORDER BY e.id`,
    ack: `DELETE FROM ${cl} WHERE group_name = $1 AND topic = $2 AND event_id = $3::bigint AND consumer = $4 RETURNING event_id`,
    nack:
      `UPDATE ${cl} SET visible_at = CASE WHEN attempts >= $6::integer THEN 'infinity' ` +
      "ELSE clock_timestamp() + $5::bigint * interval '1 millisecond' END " +
      "WHERE group_name = $1 AND topic = $2 AND event_id = $3::bigint AND consumer = $4 RETURNING visible_at = 'infinity'",
    clearTopic: `WITH c AS (DELETE FROM ${cl} WHERE topic = $1), g AS (DELETE FROM ${gr} WHERE topic = $1),
t AS (DELETE FROM ${tp} WHERE topic = $1)
DELETE FROM ${ev} WHERE topic = $1`,
    cleanupEvents: `WITH old AS (
  SELECT id FROM ${ev} WHERE created_at < clock_timestamp() - $1::bigint * interval '1 millisecond'
  ORDER BY created_at LIMIT $2
), gone AS (
  DELETE FROM ${ev} AS e USING old WHERE e.id = old.id RETURNING e.id
), c AS (
  DELETE FROM ${cl} AS c USING gone WHERE c.event_id = gone.id
)
SELECT count(*) FROM gone`,
    cleanupTopics:
      `WITH d AS (DELETE FROM ${tp} AS t WHERE t.last_at < clock_timestamp() - $1::bigint * interval '1 millisecond' ` +
      `AND NOT EXISTS (SELECT 1 FROM ${ev} AS e WHERE e.topic = t.topic) RETURNING 1) SELECT count(*) FROM d`,
    probe:
      `SELECT ${probeOf(ev, EXPECTED_COLUMNS.events)} + ${probeOf(tp, EXPECTED_COLUMNS.topics)} + ` +
      `${probeOf(gr, EXPECTED_COLUMNS.groups)} + ${probeOf(cl, EXPECTED_COLUMNS.claims)}, ` +
      `(SELECT count(*) FROM pg_trigger WHERE tgrelid = ${literal(ev)}::regclass ` +
      `AND tgname = ${literal(names.stampFunction)} AND tgenabled <> 'D')`,
    version: `SELECT version_num FROM ${q(versionTable)}`,
  };
}
