"""Checks of the diagnosis against known truth: the twin simulates, analysis diagnoses, and this
package compares the two. It imports both sides on purpose (like the tests do); nothing in the
product imports it, so `analysis` stays pure and the servers under test stay unaware of it."""
