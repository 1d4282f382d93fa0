/**
 * The error hierarchy: everything this package throws on purpose is a `LeaseError`.
 *
 * Bad arguments are rejected before any I/O with a `LeaseTypeError` (a real `TypeError`) or a
 * `LeaseRangeError` (a real `RangeError`); both also answer `instanceof LeaseError`, like the
 * Python library's `LeaseTypeError(LeaseError, TypeError)`. Database failures are
 * `LeaseDatabaseError`s, translated from the driver's errors in exactly one place
 * (`translate`), with the driver's error kept as `cause`. Contention is never an error: a lost
 * acquire race is a result with `acquired: false` and the holder's name.
 */

const BRAND: unique symbol = Symbol.for('@sql-lease/mastra:LeaseError') as never;

function branded(value: unknown): boolean {
  return typeof value === 'object' && value !== null && (value as { [BRAND]?: true })[BRAND] === true;
}

/** Root of every error this package throws on purpose. */
export class LeaseError extends Error {
  readonly [BRAND] = true as const;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }

  /** `instanceof LeaseError` also holds for `LeaseTypeError` and `LeaseRangeError`. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this === LeaseError) return branded(value);
    return Function.prototype[Symbol.hasInstance].call(this, value);
  }
}

/** An argument has the wrong type (thrown before any I/O; nothing changed). */
export class LeaseTypeError extends TypeError {
  readonly [BRAND] = true as const;
  readonly code = 'ERR_INVALID_ARG_TYPE';

  constructor(message: string) {
    super(message);
    this.name = 'LeaseTypeError';
  }
}

/**
 * An argument has the right type but an invalid value (thrown before any I/O; nothing
 * changed), or a counting call's limit differs from the key's (`LeaseLimitMismatchError`).
 */
export class LeaseRangeError extends RangeError {
  readonly [BRAND] = true as const;
  readonly code = 'ERR_OUT_OF_RANGE';

  constructor(message: string) {
    super(message);
    this.name = 'LeaseRangeError';
  }
}

/**
 * A counting call (`limit`) on a key whose live holders agreed on another limit (a plain lease
 * counts as `limit: 1`, so a plain `acquireLease` of a key held with `limit: 3` throws it too).
 * Nothing changed. The Python library's `LeaseLimitMismatchError` (a `ValueError`), same words;
 * a `LeaseRangeError` here, thrown once the database said what the holders' limit is.
 */
export class LeaseLimitMismatchError extends LeaseRangeError {
  readonly key: string;
  /** The call's limit. */
  readonly limit: number;
  /** The live holders' limit. */
  readonly heldLimit: number;

  constructor(key: string, limit: number, heldLimit: number) {
    super(
      `key ${pyRepr(key)} is held with limit=${heldLimit}; this call asked for limit=${limit}:` +
        ' every holder of a key must use the same limit',
    );
    this.name = 'LeaseLimitMismatchError';
    this.key = key;
    this.limit = limit;
    this.heldLimit = heldLimit;
  }
}

/**
 * `text` as Python's `repr` shows a str (so messages read as the Python library's): single
 * quotes unless the text has one and no double quote; backslash, the quote, control
 * characters and lone surrogates escaped. (Python also escapes a few other unprintable
 * characters, such as U+00A0; those are shown as they are here.)
 */
export function pyRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    const unit = text.charCodeAt(i);
    const pair = unit >= 0xd800 && unit <= 0xdbff && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00;
    if (pair) {
      out += c + (text[++i] as string);
    } else if (c === '\\' || c === quote) {
      out += '\\' + c;
    } else if (c === '\n') {
      out += '\\n';
    } else if (c === '\r') {
      out += '\\r';
    } else if (c === '\t') {
      out += '\\t';
    } else if (unit < 0x20 || (unit >= 0x7f && unit <= 0xa0)) {
      out += '\\x' + unit.toString(16).padStart(2, '0');
    } else if (unit >= 0xd800 && unit <= 0xdfff) {
      out += '\\u' + unit.toString(16);
    } else {
      out += c;
    }
  }
  return out + quote;
}

/**
 * The database failed to carry out an operation. `operation` names the provider method.
 * `outcomeUnknown` is true when the statement may have reached the server before the failure
 * (the connection broke, or the call timed out mid-flight): the change may or may not have been
 * applied. Every lease operation is safe to retry with the same arguments.
 */
export class LeaseDatabaseError extends LeaseError {
  readonly operation: string;
  readonly outcomeUnknown: boolean;
  /** The SQLSTATE the server gave, if any. */
  readonly sqlState: string | undefined;

  constructor(
    message: string,
    options: { operation: string; outcomeUnknown?: boolean; sqlState?: string | undefined; cause?: unknown },
  ) {
    super(message, { cause: options.cause });
    this.operation = options.operation;
    this.outcomeUnknown = options.outcomeUnknown ?? false;
    this.sqlState = options.sqlState;
  }
}

/** The database could not be reached, or the connection broke. */
export class LeaseConnectionError extends LeaseDatabaseError {}

/** The operation did not finish within the provider's `timeoutMs`. */
export class LeaseTimeoutError extends LeaseDatabaseError {}

/** The leases table is missing or not at the schema version this package needs. */
export class LeaseSchemaError extends LeaseDatabaseError {}

/**
 * How to get the `sql-lease` command that migrates a database, said in one place. The Python
 * package is not on PyPI yet, so this names the git route that works today.
 */
export const PIP_INSTALL_CLI =
  'pip install "sql-lease[cli] @ git+https://<host>/<owner>/sql_lease.git", not on PyPI yet';

// SQLSTATEs whose statement certainly did not take effect: it was cancelled or never ran.
const TIMEOUT_STATES = new Set(['57014', '55P03']); // query_canceled, lock_not_available
const SCHEMA_STATES = new Set(['42P01', '42703', '42704', '42883']); // undefined table/column/object
const CONNECTION_PREFIXES = ['08', '53', '57P', '28']; // connection, resources, shutdown, auth
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOENT', // a Unix socket that is not there
  'SQL_LEASE_NOT_WRITABLE', // hosts.ts: a server target_session_attrs refused
]);
// read_only_sql_transaction: the server is a standby or was demoted; the write was refused
// before it applied. The connection is dropped so the next one finds the writable host.
const READ_ONLY_STATE = '25006';

/** The SQLSTATE of a server error (node-postgres puts it in `code`), else undefined. */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** True when the server refused a write because it is read-only (SQLSTATE 25006). */
export function isReadOnly(error: unknown): boolean {
  return sqlState(error) === READ_ONLY_STATE;
}

/** True when `error` says the connection failed, broke or was refused. */
export function isConnectionFailure(error: unknown): boolean {
  const state = sqlState(error);
  if (state !== undefined) return CONNECTION_PREFIXES.some((p) => state.startsWith(p));
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && CONNECTION_CODES.has(code)) return true;
  // node-postgres reports a dropped socket, a failed connect, a connect timeout ('timeout
  // expired') and a pool checkout timeout as plain Errors without a code.
  const message = error instanceof Error ? error.message : '';
  return /connection|terminated|timeout exceeded when trying to connect|^timeout expired$|not queryable/i.test(message);
}

function detail(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const text = error.message.trim().split('\n')[0] ?? '';
  const kind = error.constructor.name;
  return text ? `${kind}: ${text}` : kind;
}

export interface TranslateContext {
  operation: string;
  /** Where the database is, without any password. */
  where: string;
  /** The table the statements use (for the schema error). */
  table: string;
  /** Whether a write statement may have reached the server. */
  sent: boolean;
}

/** Map a driver or pool error met while running `operation` to a typed `LeaseError`. */
export function translate(error: unknown, context: TranslateContext): LeaseError {
  if (error instanceof LeaseError) return error;
  const { operation, where, table, sent } = context;
  const state = sqlState(error);
  const base = { operation, sqlState: state, cause: error };
  if (state !== undefined) {
    if (TIMEOUT_STATES.has(state)) {
      return new LeaseTimeoutError(`${operation}: the database cancelled the statement (${detail(error)})`, base);
    }
    if (SCHEMA_STATES.has(state)) {
      return new LeaseSchemaError(
        `${operation}: the leases table ${table} or its fence sequence is missing or out of date in ` +
          `${where} (${detail(error)}); apply the migrations to this database: ` +
          `\`sql-lease migrate --url ...\` (${PIP_INSTALL_CLI}) or \`alembic upgrade head\``,
        base,
      );
    }
    if (state === READ_ONLY_STATE) {
      return new LeaseConnectionError(
        `${operation}: ${where} is read-only (a standby or a demoted primary), nothing was written ` +
          `(${detail(error)}); list every host in the URL with target_session_attrs=read-write to reach the writable one`,
        { ...base, outcomeUnknown: false },
      );
    }
    if (CONNECTION_PREFIXES.some((p) => state.startsWith(p))) {
      return new LeaseConnectionError(`${operation}: lost or refused connection to ${where} (${detail(error)})`, {
        ...base,
        outcomeUnknown: sent,
      });
    }
    return new LeaseDatabaseError(`${operation}: database error in ${where} (${detail(error)})`, base);
  }
  if (isConnectionFailure(error)) {
    return new LeaseConnectionError(`${operation}: cannot reach ${where} (${detail(error)})`, {
      ...base,
      outcomeUnknown: sent,
    });
  }
  return new LeaseDatabaseError(`${operation}: database failure in ${where} (${detail(error)})`, {
    ...base,
    outcomeUnknown: sent,
  });
}
