package policy

import (
	"testing"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

func spec(prefix string, creds compactionv1alpha1.S3CredentialsSecretRef) *compactionv1alpha1.CompactionPolicySpec {
	return &compactionv1alpha1.CompactionPolicySpec{
		ContextWindow: 8000,
		Storage: compactionv1alpha1.StorageSpec{S3: compactionv1alpha1.S3StorageSpec{
			Endpoint: "minio:9000", Bucket: "b", Prefix: prefix, Region: "eu", Protocol: compactionv1alpha1.S3HTTP, CredentialsSecretRef: creds,
		}},
	}
}

func TestKeys(t *testing.T) {
	ns := compactionv1alpha1.PolicyReference{Name: "p"}
	if got := RefKey("team", ns); got != "CompactionPolicy/team/p" {
		t.Errorf("RefKey(namespaced, kind omitted) = %q", got)
	}
	cl := compactionv1alpha1.PolicyReference{Kind: compactionv1alpha1.PolicyKindCluster, Name: "p"}
	if got := RefKey("team", cl); got != "ClusterCompactionPolicy//p" {
		t.Errorf("RefKey(cluster) = %q: a cluster policy's key must not depend on the session's namespace", got)
	}
	p := &Policy{Kind: compactionv1alpha1.PolicyKindCluster, Name: "p"}
	if p.Key() != RefKey("other", cl) {
		t.Errorf("Policy.Key %q != RefKey %q", p.Key(), RefKey("other", cl))
	}
}

func TestLocationResolvesSecretNamespaceAndPrefix(t *testing.T) {
	creds := compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: "s3"}}
	cases := []struct {
		name       string
		p          *Policy
		wantNS     string
		wantPrefix string
	}{
		{"namespaced policy reads its own namespace",
			&Policy{Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: "team", Name: "p", Spec: spec("/a/b/", creds)}, "team", "a/b/compaction_records/sid/"},
		{"cluster policy without namespace uses the operator's",
			&Policy{Kind: compactionv1alpha1.PolicyKindCluster, Name: "p", Spec: spec("", creds)}, "ops", "compaction_records/sid/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loc := tc.p.Location("sid", "ops")
			if loc.SessionPrefix != tc.wantPrefix {
				t.Errorf("SessionPrefix = %q, want %q", loc.SessionPrefix, tc.wantPrefix)
			}
			ref := loc.CredentialsSecretRef
			if !ref.IsSet() || ref.Namespace != tc.wantNS || ref.AccessKeyIDKey != "accessKeyID" || ref.SecretAccessKeyKey != "secretAccessKey" {
				t.Errorf("credentials = %+v, want namespace %s and default keys", ref, tc.wantNS)
			}
			if loc.Endpoint != "minio:9000" || loc.Bucket != "b" || loc.Region != "eu" || loc.Protocol != compactionv1alpha1.S3HTTP {
				t.Errorf("location = %+v", loc)
			}
		})
	}
	// The policy's own reference is not modified by resolving it.
	if creds.Namespace != "" || creds.AccessKeyIDKey != "" {
		t.Errorf("Location changed the policy's secret reference: %+v", creds)
	}
}

func TestSecretKeys(t *testing.T) {
	s := spec("", compactionv1alpha1.S3CredentialsSecretRef{SecretReference: compactionv1alpha1.SecretReference{Name: "s3", Namespace: "vault"}})
	s.Summarizer.OpenAI = compactionv1alpha1.OpenAISummarizerSpec{APIKeySecretRef: compactionv1alpha1.SecretKeySelector{
		SecretReference: compactionv1alpha1.SecretReference{Name: "llm"}, Key: "k"}}
	p := &Policy{Kind: compactionv1alpha1.PolicyKindCluster, Name: "p", Spec: s}
	got := p.SecretKeys("ops")
	if len(got) != 2 || got[0] != "vault/s3" || got[1] != "ops/llm" {
		t.Errorf("SecretKeys = %v, want [vault/s3 ops/llm]", got)
	}
	anon := &Policy{Kind: compactionv1alpha1.PolicyKindNamespaced, Namespace: "team", Name: "p", Spec: spec("", compactionv1alpha1.S3CredentialsSecretRef{})}
	if keys := anon.SecretKeys("ops"); len(keys) != 0 {
		t.Errorf("anonymous policy SecretKeys = %v", keys)
	}
	if loc := anon.Location("sid", "ops"); loc.CredentialsSecretRef.IsSet() {
		t.Errorf("anonymous policy location has credentials %+v", loc.CredentialsSecretRef)
	}
}
