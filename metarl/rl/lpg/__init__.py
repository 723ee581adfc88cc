"""The Learned Policy Gradient: the network (`network.py`: its architecture and the bounded text
format a candidate network travels in) and the agent it trains, with the actor-critic reference
it is measured against (`agent.py`)."""
