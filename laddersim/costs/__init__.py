"""Cost model: how long each op of one rank takes, from shapes, the hardware profile and the workload."""
