#!/bin/sh
# Facts of one cluster node for sparkbench.cluster.parse_node_probe: key=value lines.
#   sh node_probe.sh IFACE        (on the host for host networking, in the node's container for bridge)
# The interface's state and MTU (sysfs), every IPv4 of the node (ip -4 -o addr: addr=<if> <a.b.c.d/p>),
# the link speed (ethtool: "Speed: 200000Mb/s" on a CX-7 port at full rate, 10000Mb/s on a veth), the
# driver (nvidia-smi; the simulator image has a stand-in), and which link-test tools are installed.
# Read-only: changes nothing.
iface=${1:?usage: node_probe.sh IFACE}
echo "hostname=$(hostname 2>/dev/null)"
echo "operstate=$(cat /sys/class/net/"$iface"/operstate 2>/dev/null)"
echo "mtu=$(cat /sys/class/net/"$iface"/mtu 2>/dev/null)"
if command -v ip >/dev/null 2>&1; then
  ip -4 -o addr show 2>/dev/null | awk '{print "addr=" $2 " " $4}'
fi
if command -v ethtool >/dev/null 2>&1; then
  echo "ethtool=yes"
  echo "speed=$(ethtool "$iface" 2>/dev/null | sed -n 's/^[[:space:]]*Speed:[[:space:]]*//p' | head -n1)"
else
  echo "ethtool=no"
  echo "speed=$(cat /sys/class/net/"$iface"/speed 2>/dev/null)Mb/s"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)"
fi
for tool in ib_write_bw iperf3; do
  if command -v "$tool" >/dev/null 2>&1; then echo "$tool=yes"; else echo "$tool=no"; fi
done
