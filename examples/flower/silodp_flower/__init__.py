"""silodp's ISRL-DP algorithms as a Flower app (see docs/integrations.md)."""
