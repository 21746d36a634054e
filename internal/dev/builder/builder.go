// Package builder makes the operator's API objects for the tests, the demo and the load test,
// in the style of cluster-api's internal/test/builder:
//
//	builder.Policy(ns, "small").Window(8000).Storage(builder.MinIOStorage(endpoint, "b", "p", "creds")).Build()
//
// so a fixture says only what matters to its test, and a change of the API is made once.
package builder

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// DefaultWindow is the context window of a policy built without Window.
const DefaultWindow = 128000

// DefaultedSpec is a policy spec as the API server returns it for a policy that sets only
// contextWindow and storage: every default of the CRD filled in (test/crd checks that they
// are the CRD's).
func DefaultedSpec(window int32) *compactionv1alpha1.CompactionPolicySpec {
	return &compactionv1alpha1.CompactionPolicySpec{
		ContextWindow: window,
		Thresholds: compactionv1alpha1.Thresholds{WarnPercent: 60, SoftPercent: 70, FullPercent: 80, EmergencyPercent: 95,
			TargetPercent: 50, MinSavingPercent: 15},
		Offload: compactionv1alpha1.OffloadSpec{ThresholdChars: 4000, HookThresholdChars: 10000,
			PreviewLines: ptr.To[int32](10), ImageThresholdBytes: ptr.To[int32](32768)},
		MinTailMessages: 6,
		MaxSummaryChars: 6000,
		Summarizer:      compactionv1alpha1.SummarizerSpec{Mode: compactionv1alpha1.SummarizerExtractive, MaxCallsPerHour: ptr.To[int32](60)},
		Pins:            compactionv1alpha1.PinsSpec{Rule: compactionv1alpha1.PinTaskAndInstructions, BudgetPercent: 15},
		AnchorsInStatus: compactionv1alpha1.AnchorsOmit,
	}
}

// MinIOStorage is storage in a local MinIO: plain HTTP, the bucket created when missing, the
// access key pair in the Secret secretName (keys accessKeyID and secretAccessKey, as
// MinIOSecret writes them).
func MinIOStorage(endpoint, bucket, prefix, secretName string) compactionv1alpha1.StorageSpec {
	return compactionv1alpha1.StorageSpec{S3: compactionv1alpha1.S3StorageSpec{
		Endpoint: endpoint, Bucket: bucket, Prefix: prefix,
		Protocol: compactionv1alpha1.S3HTTP, CreateBucket: compactionv1alpha1.BucketCreationIfNotPresent,
		CredentialsSecretRef: compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: secretName}},
	}}
}

// MinIOSecret is the Secret MinIOStorage names, holding a MinIO access key pair and labelled
// for policies' use (CredentialsSecret).
func MinIOSecret(namespace, name, accessKey, secretKey string) *corev1.Secret {
	return CredentialsSecret(namespace, name, map[string]string{"accessKeyID": accessKey, "secretAccessKey": secretKey})
}

// CredentialsSecret is a Secret policies may use: labelled
// compaction.harness9.io/credentials=true (the operator uses no other), holding data.
func CredentialsSecret(namespace, name string, data map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{
			compactionv1alpha1.CredentialsLabel: compactionv1alpha1.CredentialsLabelValue,
		}},
		StringData: data,
	}
}

// PolicyBuilder builds a CompactionPolicy.
type PolicyBuilder struct {
	obj compactionv1alpha1.CompactionPolicy
}

// Policy starts a CompactionPolicy namespace/name with a window of DefaultWindow tokens and
// no storage.
func Policy(namespace, name string) *PolicyBuilder {
	return &PolicyBuilder{obj: compactionv1alpha1.CompactionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       compactionv1alpha1.CompactionPolicySpec{ContextWindow: DefaultWindow},
	}}
}

// Window sets the context window, in tokens.
func (b *PolicyBuilder) Window(tokens int32) *PolicyBuilder {
	b.obj.Spec.ContextWindow = tokens
	return b
}

// Storage sets the storage.
func (b *PolicyBuilder) Storage(s compactionv1alpha1.StorageSpec) *PolicyBuilder {
	b.obj.Spec.Storage = s
	return b
}

// AnchorsInStatus sets whether sessions copy their anchors into status.
func (b *PolicyBuilder) AnchorsInStatus(a compactionv1alpha1.AnchorsInStatus) *PolicyBuilder {
	b.obj.Spec.AnchorsInStatus = a
	return b
}

// Spec lets mutate change anything else of the spec; a nil mutate changes nothing.
func (b *PolicyBuilder) Spec(mutate func(*compactionv1alpha1.CompactionPolicySpec)) *PolicyBuilder {
	if mutate != nil {
		mutate(&b.obj.Spec)
	}
	return b
}

// Build returns the policy; the builder can go on to build another.
func (b *PolicyBuilder) Build() *compactionv1alpha1.CompactionPolicy {
	return b.obj.DeepCopy()
}

// SessionBuilder builds an AgentSession.
type SessionBuilder struct {
	obj compactionv1alpha1.AgentSession
}

// Session starts an AgentSession namespace/name of the CompactionPolicy policy (in its
// namespace).
func Session(namespace, name, policy string) *SessionBuilder {
	return &SessionBuilder{obj: compactionv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: compactionv1alpha1.AgentSessionSpec{PolicyRef: compactionv1alpha1.PolicyReference{
			Kind: compactionv1alpha1.PolicyKindNamespaced, Name: policy}},
	}}
}

// Cluster makes the session use the ClusterCompactionPolicy of its policy name instead.
func (b *SessionBuilder) Cluster() *SessionBuilder {
	b.obj.Spec.PolicyRef.Kind = compactionv1alpha1.PolicyKindCluster
	return b
}

// Window overrides the policy's context window, in tokens.
func (b *SessionBuilder) Window(tokens int32) *SessionBuilder {
	b.obj.Spec.ContextWindow = tokens
	return b
}

// Build returns the session; the builder can go on to build another.
func (b *SessionBuilder) Build() *compactionv1alpha1.AgentSession {
	return b.obj.DeepCopy()
}
