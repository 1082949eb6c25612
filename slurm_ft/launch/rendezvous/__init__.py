"""How the launchers of one job meet: the store, its key table and messages, sealing, the job
secret, and the background threads that watch the store and the peers."""
