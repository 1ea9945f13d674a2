//! The controller rolling update without I/O: controllers and their pods as data, the seed's
//! step arithmetic, what the next controller looks like, the scale loop as a step machine, and
//! the planner that drives it with simulated pods. The live driver is `crate::workload`.
//! `partition_loop` is the StatefulSet's partitioned update and `node_loop` the DaemonSet's
//! node-by-node one, machines of the same shape.

pub mod asks;
pub mod controller;
pub mod daemon_set;
pub mod flow;
pub mod in_place;
pub mod node_loop;
pub mod node_planner;
pub mod partition_loop;
pub mod partition_planner;
pub mod planner;
pub mod planning;
pub mod pods;
pub mod prepare;
pub mod scale_loop;
pub mod stateful_set;
pub mod steps;
pub mod template;
