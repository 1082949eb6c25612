"""Where ranks run and what each node keeps: placement, spare nodes, snapshots."""

from __future__ import annotations

from slurm_ft.cli.launchtable.records import OptionGroup, opt

PLACEMENT = OptionGroup(
    "CPU/NUMA binding, NIC affinity, NIC monitoring",
    (
        opt(
            "--numa-binding",
            "--numa_binding",
            dest="numa_binding",
            metavar="none|node|socket|exclusive",
            help="bind each worker to the CPUs of its GPU's NUMA node, socket or an exclusive share",
            setting="launch.numa_binding",
        ),
        opt(
            "--nic-affinity",
            dest="nic_affinity",
            takes="switch",
            help="NCCL_IB_HCA per worker",
            setting="launch.nic_affinity",
        ),
        opt(
            "--nic-monitor",
            dest="nic_monitor",
            takes="switch",
            help="watch NIC links in training",
            setting="health.nic_monitor",
        ),
        opt(
            "--nic-monitor-interval",
            dest="nic_monitor_interval",
            metavar="S",
            help="seconds between two NIC samples",
            setting="health.nic_monitor_interval",
        ),
        opt(
            "--nic-monitor-fatal",
            dest="nic_monitor_fatal",
            takes="switch",
            help="a NIC down fails the node",
            setting="health.nic_monitor_fatal",
        ),
    ),
)

SPARES = OptionGroup(
    "spare nodes",
    (
        opt(
            "--spare-nodes",
            dest="spare_nodes",
            metavar="K",
            help="of the job's nodes, K stand by and replace a lost, unhealthy or suspect node",
            setting="launch.spare_nodes",
        ),
        opt(
            "--segment",
            dest="segment",
            metavar="S",
            help="with spares, nodes are active or spare in groups of S consecutive hostlist entries",
            setting="launch.segment",
        ),
        opt(
            "--suspect-after",
            dest="suspect_after",
            metavar="M",
            help="with spares, replace a node that hosted the first failure of M cycles in a row",
            setting="launch.suspect_after",
        ),
    ),
)

SNAPSHOTS = OptionGroup(
    'in-memory snapshots (README "Snapshots")',
    (
        opt(
            "--snapshot-memory",
            dest="snapshot_memory",
            metavar="SIZE|auto",
            help="shared memory this node's workers may fill with snapshots (16G, 512M); "
            "auto: from the node's memory and /dev/shm; 0: no snapshots",
            setting="launch.snapshot_memory",
        ),
        opt(
            "--snapshot-persist-dir",
            dest="snapshot_persist_dir",
            metavar="DIR",
            help="on a preemption, a last cycle or the job's end, the launchers write the newest "
            "snapshot here (each rank's snapshot file, copied); the requeued attempt restores from it",
            setting="launch.snapshot_persist_dir",
        ),
        opt(
            "--snapshot-persist-hook",
            dest="snapshot_persist_hook",
            metavar="MODULE:FUNCTION",
            help="persist through the trainer's own function instead (called by the launcher with "
            "each rank's snapshot)",
            setting="launch.snapshot_persist_hook",
        ),
        opt(
            "--snapshot-persist-timeout",
            dest="snapshot_persist_timeout",
            metavar="S",
            help="the longest persisting may take (a dead mount never holds the allocation)",
            setting="launch.snapshot_persist_timeout",
        ),
        opt(
            "--snapshot-replicas",
            dest="snapshot_replicas",
            metavar="N",
            help="copies of each node's shard snapshots kept in another node's memory (0 or 1): "
            "a lost node's shards survive",
            setting="launch.snapshot_replicas",
        ),
    ),
)
