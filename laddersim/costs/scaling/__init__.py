"""What-if factors of a profile's links: ``view`` applies them (the only place the formulas meet
them), ``nominal`` names the quantity each one multiplies for a TP group."""
