"""Several "machines" on one host, as the launcher's two-machine tests run them (test/launch/train_test.py): one
`accel launch` per machine, machine 0 serving the rendezvous on 127.0.0.1, and, where a private network namespace
can be made (`unshare -n`, root or CAP_SYS_ADMIN), machines 1.. binding their Gloo sockets to 127.0.0.2 (loopback
labelled lo:m1, named through GLOO_SOCKET_IFNAME), so that no two machines share an address.

    enter_machine_namespace()          # first thing in main(): re-runs the script inside the namespace, or notes why not
    commands = launch_commands(accel, machines, nproc, program)
    env_of(machine)                    # the environment of machine `machine`'s launcher
"""
import os
import socket
import subprocess
import sys

MARK = "ACCEL_TEST_MACHINE_NAMESPACE"
SETUP = "ip link set lo up && ip addr add 127.0.0.2/8 dev lo label lo:m1 && exec \"$@\""


def enter_machine_namespace():
    """Re-executes the running script in a private network namespace whose loopback also has 127.0.0.2 (lo:m1);
    returns when already inside one, or when none can be made (saying so: every machine then uses 127.0.0.1)."""
    if os.environ.get(MARK):
        return
    probe = subprocess.run(["unshare", "-n", "sh", "-c", SETUP, "sh", "true"], capture_output=True)
    if probe.returncode != 0:
        os.environ[MARK] = "none"
        print("NOTE: cannot create a network namespace (unshare -n needs CAP_SYS_ADMIN); every machine binds "
              "127.0.0.1", flush=True)
        return
    os.environ[MARK] = "lo:m1"
    sys.stdout.flush()
    os.execvp("unshare", ["unshare", "-n", "sh", "-c", SETUP, "sh", sys.executable, *sys.argv])


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_commands(accel, machines, nproc, program):
    """One `accel launch` per machine: nproc ranks in all, machine 0 serving the rendezvous at a free port."""
    port = str(free_port())
    return [[accel, "launch", "--num_machines", str(machines), "--machine_rank", str(machine), "--num_processes",
             str(nproc), "--main_process_ip", "127.0.0.1", "--main_process_port", port, *program]
            for machine in range(machines)]


def env_of(machine, base):
    """Machine `machine`'s launcher environment: machines 1.. bind lo:m1 (127.0.0.2) inside the namespace."""
    env = dict(base)
    interface = os.environ.get(MARK, "none")
    if machine > 0 and interface != "none":
        env["GLOO_SOCKET_IFNAME"] = interface
    return env
