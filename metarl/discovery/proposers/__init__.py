"""Proposers turn the loop's request into candidate source. See base.py for the contract."""
