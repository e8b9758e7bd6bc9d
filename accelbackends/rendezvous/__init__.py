"""Floor 2, the rendezvous: how the ranks of a job meet, on torch's store.

- `store`: hosting and connecting the store with deadlines, the count-in of the ranks.
- `storewire`: just enough of torch's TCP store protocol, in plain Python, to ask a port
  with a deadline whether a live store is there before torch's client (which cannot be
  interrupted) connects to it.
- `membership`: the proof that every rank holds the job's secret.
- `secret`: where that secret comes from (``info`` reads only this).
- `network`: which interface reaches the rendezvous host, and whether a port is free.
- `torchlog`: torch's C++ log level, set in this one place.

Nothing is imported here: ``info`` imports `secret` and `network` alone and must not pay for the
store's or the proof's imports.
"""
