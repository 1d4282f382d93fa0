/** The contract suite of contract.test.ts again, on a host list (first host down, target_session_attrs=read-write). */

process.env.SQL_LEASE_TS_HOSTS = 'list';
await import('./contract.test.js');
