"""Pipeline x tensor parallel: stages placed on the profile's nodes (``placement``), their passes
composed into a step, one batch or several micro-batches in flight (``timing``), and a pipeline
scenario simulated stage by stage (``run``). The stages' op programs are schedules' data
(``laddersim.schedules.stages``); the boundary's point-to-point time is a cost
(``laddersim.costs.point_to_point``)."""
