package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
)

// Where a session's objects live is decided once, from its policy, when the session first
// becomes Ready, and kept for the session's life: the objects stay where they were written
// when the policy's storage changes, and the finalizer can delete them after the policy is
// gone. That location names a credentials Secret (with its namespace) and an endpoint the
// operator sends that Secret's key to, so it must not be kept anywhere a tenant can write:
// not in the AgentSession's status (anyone allowed to patch agentsessions/status, which
// namespace admins with wildcard roles are, could point it at a Secret of another namespace
// and an endpoint they run), not in its spec, labels or annotations.
//
// The operator keeps it in an immutable ConfigMap of its own namespace (the cluster resource
// namespace, which already holds the credentials of cluster policies, so whoever may write
// there holds those credentials anyway): the session's *pinned location*. status.records is a
// copy for people, never read back. The ConfigMap is named after the session's namespace and
// name, labelled with its UID (a pin of an earlier session of the same name is not this
// session's), and deleted after the session's objects are.

// Labels and annotations of a pinned-location ConfigMap.
const (
	// LocationUIDLabel holds the UID of the session the location is pinned for; the
	// manager's cache holds only ConfigMaps with this label.
	LocationUIDLabel = "compaction.harness9.io/session-uid"
	// LocationSessionAnnotation holds the session's "namespace/name".
	LocationSessionAnnotation = "compaction.harness9.io/session"
	locationManagedBy         = "compaction-operator"
	locationKey               = "location"
	locationPolicyKey         = "policy"
)

// ErrInvalidLocation is returned for a pinned location that does not hold together (a
// ConfigMap edited or written by someone else than the operator): it is never used.
var ErrInvalidLocation = errors.New("invalid pinned storage location")

// Pinned is a session's pinned storage location.
type Pinned struct {
	// Location is where the session's objects live, its credentials Secret included.
	Location *compactionv1alpha1.RecordsLocation
	// Policy is the key (Key) of the policy the location was taken from.
	Policy string
	// object is the ConfigMap, for a delete that removes this one only.
	object *corev1.ConfigMap
}

// LocationName is the name of the ConfigMap pinning the location of the session
// namespace/name: a hash, as "namespace.name" can be longer than an object name may be.
func LocationName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return "agentsession-" + hex.EncodeToString(sum[:16])
}

// LocationCache is the manager cache's setting for ConfigMaps: only the pinned locations, only
// in namespace (the operator needs no other ConfigMap, and no right to list any elsewhere).
func LocationCache(namespace string) map[client.Object]cache.ByObject {
	req, err := labels.NewRequirement(LocationUIDLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	return map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
		Namespaces: map[string]cache.Config{namespace: {}},
		Label:      labels.NewSelector().Add(*req),
	}}
}

// Locations reads and writes the pinned locations in Namespace.
type Locations struct {
	// Namespace holds the ConfigMaps: the cluster resource namespace.
	Namespace string
	// Reader reads them, usually from the manager's cache (see LocationCache).
	Reader client.Reader
	// APIReader, when set, is asked when Reader has not seen a ConfigMap (yet).
	APIReader client.Reader
	// Writer creates and deletes them; only Pin and Delete need it.
	Writer client.Writer
	// Decoded, when set, keeps what Get decoded, so a request does not decode the same
	// ConfigMap again.
	Decoded *DecodedLocations
	// Index, when set and synced, is read instead of Reader (Reader is read until it has
	// synced). What it returns is shared: Get only reads it.
	Index *LocationIndex
}

// DecodedLocations keeps decoded pinned locations by what decoding reads (the ConfigMap's
// data and session annotation, the session), so the same ConfigMap is not decoded again.
// Safe for concurrent use.
type DecodedLocations struct {
	cache *lru.Cache[decodedKey, *Pinned]
}

type decodedKey struct {
	location, policy, annotation string
	session                      types.UID
	namespace, name              string
}

// NewDecodedLocations keeps at most size decoded locations, the least recently used
// forgotten first.
func NewDecodedLocations(size int) (*DecodedLocations, error) {
	c, err := lru.New[decodedKey, *Pinned](size)
	if err != nil {
		return nil, fmt.Errorf("decoded locations: %w", err)
	}
	return &DecodedLocations{cache: c}, nil
}

// copyPinned is a copy of p a caller may change, for the ConfigMap cm.
func copyPinned(p *Pinned, cm *corev1.ConfigMap) *Pinned {
	out := *p
	loc := *p.Location
	out.Location, out.object = &loc, cm
	return &out
}

func (l Locations) key(namespace, name string) client.ObjectKey {
	return client.ObjectKey{Namespace: l.Namespace, Name: LocationName(namespace, name)}
}

// Get returns the location pinned for s, or nil when none is pinned for this session (also when
// the ConfigMap was pinned for an earlier session of the same name). A pinned location that
// does not hold together is ErrInvalidLocation.
func (l Locations) Get(ctx context.Context, s *compactionv1alpha1.AgentSession) (*Pinned, error) {
	cm, err := l.read(ctx, s.Namespace, s.Name)
	if err != nil || cm == nil {
		return nil, err
	}
	if types.UID(cm.Labels[LocationUIDLabel]) != s.UID {
		return nil, nil
	}
	if l.Decoded == nil {
		return decodePinned(cm, s)
	}
	key := decodedKey{location: cm.Data[locationKey], policy: cm.Data[locationPolicyKey], annotation: cm.Annotations[LocationSessionAnnotation],
		session: s.UID, namespace: s.Namespace, name: s.Name}
	if p, ok := l.Decoded.cache.Get(key); ok {
		return copyPinned(p, cm), nil
	}
	p, err := decodePinned(cm, s)
	if err != nil {
		return nil, err
	}
	l.Decoded.cache.Add(key, copyPinned(p, nil)) // without the ConfigMap: it is read anyway
	return p, nil
}

func (l Locations) read(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	key := l.key(namespace, name)
	if cm, known := l.Index.lookup(key); known && cm != nil {
		return cm, nil
	}
	var cm corev1.ConfigMap
	err := l.Reader.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) && l.APIReader != nil {
		err = l.APIReader.Get(ctx, key, &cm)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pinned location %s: %w", key, err)
	}
	return &cm, nil
}

// decodePinned checks that cm is a location the operator pinned for s. Beyond the UID, it
// checks what the operator would have written: the session's annotation, a location whose
// session prefix is the session's own, and for a namespaced policy the policy and its
// credentials Secret in the session's namespace (only a ClusterCompactionPolicy, which a
// cluster admin writes, may name a Secret elsewhere).
func decodePinned(cm *corev1.ConfigMap, s *compactionv1alpha1.AgentSession) (*Pinned, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: ConfigMap %s/%s: %s", ErrInvalidLocation, cm.Namespace, cm.Name, fmt.Sprintf(format, args...))
	}
	if got := cm.Annotations[LocationSessionAnnotation]; got != s.Namespace+"/"+s.Name {
		return nil, invalid("pinned for session %q, not %s/%s", got, s.Namespace, s.Name)
	}
	var loc compactionv1alpha1.RecordsLocation
	if err := json.Unmarshal([]byte(cm.Data[locationKey]), &loc); err != nil {
		return nil, invalid("%s: %v", locationKey, err)
	}
	switch loc.Protocol {
	case compactionv1alpha1.S3HTTPS, compactionv1alpha1.S3HTTP:
	case "":
		// Pinned before v1alpha1 named the protocol: plain HTTP was "insecure": true.
		var legacy struct {
			Insecure bool `json:"insecure"`
		}
		if err := json.Unmarshal([]byte(cm.Data[locationKey]), &legacy); err != nil {
			return nil, invalid("%s: %v", locationKey, err)
		}
		loc.Protocol = compactionv1alpha1.S3HTTPS
		if legacy.Insecure {
			loc.Protocol = compactionv1alpha1.S3HTTP
		}
	default:
		return nil, invalid("unknown protocol %q", loc.Protocol)
	}
	if want := sessionPrefix(loc.Prefix, string(s.UID)); loc.SessionPrefix != want {
		return nil, invalid("session prefix %q is not the session's %q", loc.SessionPrefix, want)
	}
	key := cm.Data[locationPolicyKey]
	kind, rest, _ := strings.Cut(key, "/")
	policyNamespace, _, _ := strings.Cut(rest, "/")
	switch compactionv1alpha1.PolicyKind(kind) {
	case compactionv1alpha1.PolicyKindNamespaced:
		if policyNamespace != s.Namespace {
			return nil, invalid("policy %q is not in the session's namespace", key)
		}
		if ref := loc.CredentialsSecretRef; ref.IsSet() && ref.Namespace != s.Namespace {
			return nil, invalid("a CompactionPolicy's credentials Secret %s/%s is not in the session's namespace", ref.Namespace, ref.Name)
		}
	case compactionv1alpha1.PolicyKindCluster:
	default:
		return nil, invalid("unknown policy %q", key)
	}
	if ref := loc.CredentialsSecretRef; ref != (compactionv1alpha1.S3CredentialsSecretRef{}) && (ref.Namespace == "" || ref.Name == "") {
		return nil, invalid("credentials Secret without a namespace or name")
	}
	return &Pinned{Location: &loc, Policy: key, object: cm}, nil
}

// sessionPrefix is the key prefix of a session's records under the policy prefix, normalized
// as the store does it (no leading slash, one trailing slash).
func sessionPrefix(prefix, sessionID string) string {
	p := compaction.SessionPrefixes(sessionID)[1]
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		p = prefix + "/" + p
	}
	return p
}

// Pin pins where p stores s's objects, unless a location is pinned for s already: it returns
// the location pinned for s, which is the one to use. A ConfigMap of an earlier session of the
// same name (left behind when its finalizer was removed by hand) is replaced.
func (l Locations) Pin(ctx context.Context, s *compactionv1alpha1.AgentSession, p *Policy, clusterResourceNamespace string) (*Pinned, error) {
	loc := p.Location(string(s.UID), clusterResourceNamespace)
	data, err := json.Marshal(loc)
	if err != nil {
		return nil, fmt.Errorf("encode location: %w", err)
	}
	key := l.key(s.Namespace, s.Name)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{
				LocationUIDLabel:               string(s.UID),
				"app.kubernetes.io/managed-by": locationManagedBy,
			},
			Annotations: map[string]string{LocationSessionAnnotation: s.Namespace + "/" + s.Name},
		},
		Immutable: ptr.To(true),
		Data:      map[string]string{locationKey: string(data), locationPolicyKey: p.Key()},
	}
	for range 2 {
		created := cm.DeepCopy()
		err := l.Writer.Create(ctx, created)
		if err == nil {
			return &Pinned{Location: loc, Policy: p.Key(), object: created}, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("pin storage location in ConfigMap %s: %w", key, err)
		}
		// Pinned already: by an earlier reconcile the cache has not shown yet, or for an
		// earlier session of this name.
		reader := l.APIReader
		if reader == nil {
			reader = l.Reader
		}
		var cur corev1.ConfigMap
		if err := reader.Get(ctx, key, &cur); err != nil {
			return nil, fmt.Errorf("read pinned location %s: %w", key, err)
		}
		if types.UID(cur.Labels[LocationUIDLabel]) == s.UID {
			return decodePinned(&cur, s)
		}
		if err := l.delete(ctx, &cur); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("pin storage location in ConfigMap %s: it keeps being re-created", key)
}

// Delete deletes the location pinned for the session namespace/name, if any: keep is the UID
// of the session of that name that exists now (empty when none does), whose pin stays.
func (l Locations) Delete(ctx context.Context, namespace, name string, keep types.UID) error {
	cm, err := l.read(ctx, namespace, name)
	if err != nil || cm == nil {
		return err
	}
	if keep != "" && types.UID(cm.Labels[LocationUIDLabel]) == keep {
		return nil
	}
	return l.delete(ctx, cm)
}

// Release deletes pin's ConfigMap, once the session's objects are gone.
func (l Locations) Release(ctx context.Context, pin *Pinned) error {
	if pin == nil || pin.object == nil {
		return nil
	}
	return l.delete(ctx, pin.object)
}

// delete deletes this very ConfigMap (its UID), never one created in its place meanwhile.
func (l Locations) delete(ctx context.Context, cm *corev1.ConfigMap) error {
	var pre client.Preconditions
	if cm.UID != "" {
		pre.UID = &cm.UID
	}
	err := l.Writer.Delete(ctx, cm, pre)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pinned location %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}

// SameLocation reports whether two locations are the same (nil only equals nil).
func SameLocation(a, b *compactionv1alpha1.RecordsLocation) bool {
	return equality.Semantic.DeepEqual(a, b)
}
