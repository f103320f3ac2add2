"""Communication: the fabric over the topology graph, collective algorithms and their schedules, TP
groups and layouts, symmetry, NCCL host enqueue."""
