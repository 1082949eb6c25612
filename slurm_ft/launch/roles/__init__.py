"""The launcher's two roles and their parts: every node's duties (member) and node 0's extra
duties (coordinator), each beside the pieces cut from it (nodehealth, workerstop, watchend;
joins, decisions). The cycle loop (``launch/cycle/``) sequences them."""
