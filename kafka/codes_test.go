package kafka

import "testing"

// The error codes come from kerr; these are the protocol's numbers the
// produce and consume sides were written against (a kerr rename must not
// change a code).
func TestErrorCodes(t *testing.T) {
	for _, c := range []struct {
		got  int16
		want int16
	}{
		{CodeUnknownServerError, -1}, {CodeOffsetOutOfRange, 1}, {CodeCorruptMessage, 2}, {CodeUnknownTopicOrPartition, 3},
		{CodeLeaderNotAvailable, 5}, {CodeNotLeaderOrFollower, 6}, {CodeMessageTooLarge, 10}, {CodeOffsetMetadataTooLarge, 12},
		{CodeCoordinatorLoadInProgr, 14}, {CodeCoordinatorNotAvail, 15}, {CodeNotCoordinator, 16}, {CodeInvalidTopic, 17},
		{CodeNotEnoughReplicas, 19}, {CodeNotEnoughReplicasAfterAppend, 20}, {CodeInvalidRequiredAcks, 21},
		{CodeIllegalGeneration, 22}, {CodeInconsistentProtocol, 23}, {CodeInvalidGroupID, 24}, {CodeUnknownMemberID, 25},
		{CodeInvalidSessionTimeout, 26}, {CodeRebalanceInProgress, 27}, {CodeInvalidCommitOffsetSize, 28},
		{CodeTopicAuthorizationFailed, 29}, {CodeGroupAuthorizationFailed, 30}, {CodeUnsupportedSaslMechanism, 33},
		{CodeIllegalSaslState, 34}, {CodeUnsupportedVersion, 35}, {CodeInvalidRequest, 42}, {CodePolicyViolation, 44},
		{CodeOutOfOrderSequence, 45}, {CodeInvalidProducerEpoch, 47}, {CodeInvalidProducerIDMapping, 49},
		{CodeKafkaStorageError, 56}, {CodeSaslAuthenticationFailed, 58}, {CodeMemberIDRequired, 79},
		{CodeGroupMaxSizeReached, 81}, {CodeInvalidRecord, 87},
	} {
		if c.got != c.want {
			t.Errorf("code %d, want %d", c.got, c.want)
		}
	}
}
