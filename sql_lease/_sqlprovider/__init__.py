"""The async SQL provider wing: `SqlLeaseProvider` (``provider``), its extensions, the execution
loop, held connections, the coalescer (``coalescer``: queues and lanes) and the batch senders
(``batch_senders``: how a batch of calls goes out), the table's schema home, fork safety and
`guard`. What differs between databases comes from `sql_lease.backends`."""
