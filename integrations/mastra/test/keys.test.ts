/**
 * Keys and owners as stored bytes (keys.ts), without a database: WTF-8 for lone surrogates,
 * the long-key mapping identical to Python's `sql_lease.map_long_key` (the shared vectors of
 * key-vectors.json, also read by tests/unit/test_keys.py), and decoding that refuses bytes no
 * string can produce.
 */

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { LeaseDatabaseError, mapLongKey } from '../src/index.js';
import { decodeName, fromWtf8, mappedBytes, wtf8 } from '../src/keys.js';
import { checkKey } from '../src/validate.js';
import { PACKAGE_DIR } from './helpers.js';

const { vectors } = JSON.parse(readFileSync(`${PACKAGE_DIR}test/key-vectors.json`, 'utf8')) as {
  vectors: { key: string; stored_hex: string }[];
};

test('the stored bytes of every shared vector are what Python computes', () => {
  assert.ok(vectors.length >= 15);
  for (const { key, stored_hex } of vectors) {
    assert.equal(checkKey(key).toString('hex'), stored_hex, JSON.stringify(key).slice(0, 40));
    assert.equal(wtf8(mapLongKey(key)).toString('hex'), stored_hex);
  }
});

test('WTF-8 is UTF-8 for valid text and the 3-byte form for a lone surrogate', () => {
  for (const text of ['k', 'a\0b', '\u00e9\u4e2d\u{1f600}', '\uffff']) assert.deepEqual(wtf8(text), Buffer.from(text, 'utf8'));
  assert.equal(wtf8('a\ud800').toString('hex'), '61eda080');
  assert.equal(wtf8('\udfff\ud800').toString('hex'), 'edbfbfeda080');
  assert.notDeepEqual(wtf8('a\ud800'), wtf8('a\ufffd'));
});

test('stored bytes decode back to the same string', () => {
  for (const text of ['k', 'lone\ud800', '\udc00', 'a\udbff\u{1f600}\udc00b', '\0'.repeat(3), mapLongKey('x'.repeat(4000))]) {
    assert.equal(fromWtf8(wtf8(text)), text);
  }
});

test('bytes no string stores are refused, with the key in hex', () => {
  const foreign = ['ff', 'c0af', 'e080af', 'eda080edb080' /* a pair as two halves */, 'f4908080', 'e282'];
  for (const hex of foreign) assert.equal(fromWtf8(Buffer.from(hex, 'hex')), undefined, hex);
  assert.throws(
    () => decodeName(Buffer.from('ff', 'hex'), 'owner', Buffer.from('k\0'), 'getLeaseOwner'),
    (error: unknown) => error instanceof LeaseDatabaseError && /key \(hex\) 6b00/.test(error.message) && /ff/.test(error.message),
  );
});

test('a long key maps to at most 1024 bytes, its head then the SHA-256 of the whole', () => {
  const keys = ['x'.repeat(4000), 'x'.repeat(4000) + 'y', 'x'.repeat(1025), '\ud800'.repeat(400)];
  const mapped = keys.map((k) => mappedBytes(wtf8(k)));
  for (const m of mapped) assert.ok(m.length <= 1024 && m.includes(Buffer.from('\0sql-lease-sha256:')));
  assert.equal(new Set(mapped.map((m) => m.toString('hex'))).size, keys.length);
  assert.equal(mapLongKey('x'.repeat(1024)), 'x'.repeat(1024));
});
