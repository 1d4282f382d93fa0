/** The contract suite of contract.test.ts again, through a real PgBouncer in transaction pooling. */

process.env.SQL_LEASE_TS_POOLER = 'transaction';
await import('./contract.test.js');
