// Package membership is cluster membership for one fencelock node: who is
// in the raft configuration and at which client address, the changes to
// it (join, announce, remove), every member's health, and this node's own
// standing (a member, a node still joining, or one removed). It works over
// the replica interface (internal/replica) and the replicated members
// table (internal/fsm), never over a raft engine, and asks the lock
// service on the same node only what a change needs from it (Service):
// whether this node is the ready leader, whether it takes writes, and to
// propose a command stamped with cluster time.
//
// A change is made by the leader, one at a time (a mutex holds the next
// one until the last has answered), in three steps:
//
//  1. Probe. A joining node must answer at its client address as the node
//     named, at the raft address given, with a raft transport, in no
//     cluster or this one; and its raft port must take this node's
//     connection. Anything else is refused and nothing changes.
//  2. Check the quorum (the strict reconfiguration check). The voters the
//     configuration would have after the change are asked who they are,
//     in parallel, at the client addresses the members table records; a
//     change after which fewer than a majority would answer is refused,
//     naming those that did not.
//  3. Change. A new node is added as a non-voter, so that it counts for no
//     quorum until it has the log; once it has applied as far as the
//     leader's commit index (within JoinCatchUp), the quorum is checked
//     again and it is promoted to voter. A node that does not catch up
//     stays a non-voter and the answer says how to finish. Removing a
//     voter checks the voters left; the leader asked to remove itself
//     hands leadership to another voter first and answers not_leader
//     naming it, so that the new leader makes the removal.
//
// A failure after the change was submitted is change_unknown: it may have
// taken effect, and the members answer tells. A change refused because
// this node does not lead changed nothing.
//
// Removed nodes. Raft on a node taken out of the configuration stops
// campaigning and says nothing more, so the node notices by itself: once
// a configuration it has seen itself in no longer lists it, it is
// removed, logs it once, and every call it is asked answers removed (not
// not_leader, which would send clients to a leader that will not have it
// back). A node that has not been a member in this process (one started to
// join, or replaying configurations older than the one that added it) is
// not removed: it is not in yet. Its not-ready answer is then what its
// join says (JoinStatus). A removed node that is added again is a member
// again.
//
// Health. The members view gives every member's health as the leader
// sees it: the leader's own (replica.Peers), asked of it by a follower
// for at most UnreachableAfter. A node that hears from no leader, or
// whose leader does not answer in time, answers at once with its own
// view instead (replica.Contacts: when it last heard from each member
// itself), its raft role and term, and whether it knows a leader at all
// (api.MembersResponse.NoLeader, Local): what an operator needs when the
// cluster has lost its quorum.
//
// Every node with a client address makes sure the members table has it:
// while it follows and the table lacks its current addresses, it asks
// the leader to record them (Announce), so followers can send clients to
// the leader however the cluster was formed; a leader records its own on
// taking over (RecordSelf).
package membership
