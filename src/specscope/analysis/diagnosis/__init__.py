"""The diagnosis: measured run -> facts -> rule cards -> findings, with the series and the breakeven against a baseline."""
