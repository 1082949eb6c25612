"""Store succession: when node 0's store host is lost or frozen, another launcher takes the
store over under the next epoch, or the job takes the way out. rule (who may succeed: pure,
plus the claim file's race), storeloss (the agent's side: noticing the loss, claiming,
following), handover (the successor's and the followers' sides), fence (the lost host's
processes). Empty on purpose: importing the package loads none of them, so a launch's start
pays only for what it uses."""
