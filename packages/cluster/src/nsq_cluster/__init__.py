"""nsq-cluster: nsqlookupd, N nsqd and nsqadmin on this machine in one command.

It runs the daemons' executables as child processes and imports none of their code.
"""

from .runner import Failure, Runner, check_ports, find_executable, port_problem
from .topology import Port, Service, Topology, plan

__all__ = ["Failure", "Port", "Runner", "Service", "Topology", "check_ports", "find_executable",
           "plan", "port_problem"]
