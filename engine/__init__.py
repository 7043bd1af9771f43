"""The execution engine: delta batches, operators, queues, synopses, scheduler, and the `Dsms` facade."""
