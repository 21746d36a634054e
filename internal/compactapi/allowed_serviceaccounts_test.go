package compactapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactapi/authz"
	"github.com/harness9/compaction-operator/internal/dev/builder"
)

// TestCheckOwnerAllowedServiceAccounts is issue 28, item 7: spec.allowedServiceAccounts limits
// a session to the ServiceAccounts it lists (in the session's namespace), besides the callers
// allowed to update the AgentSession; for a pod-owned session it adds accounts to the pod's
// own token. Without a Pod owner and without the list, every agent of the namespace passes
// (the open default the field's documentation states). The SubjectAccessReviews are a fake
// that allows "update" to the editor only.
func TestCheckOwnerAllowedServiceAccounts(t *testing.T) {
	const ns = "team"
	sa := func(name string) authenticationv1.UserInfo {
		return authenticationv1.UserInfo{Username: "system:serviceaccount:" + ns + ":" + name,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	}
	bound := func(u authenticationv1.UserInfo, pod, uid string) authenticationv1.UserInfo {
		u.Extra = map[string]authenticationv1.ExtraValue{authz.PodNameExtra: {pod}, authz.PodUIDExtra: {uid}}
		return u
	}
	session := func(name string, listed []string, podOwned bool) *compactionv1alpha1.AgentSession {
		s := builder.Session(ns, name, "p").Build()
		s.Spec.AllowedServiceAccounts = listed
		if podOwned {
			s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID("uid-" + name)}}
		}
		return s
	}
	objs := []client.Object{
		session("open", nil, false),
		session("listed", []string{"agent-a", "agent-c"}, false),
		session("pod-x", []string{"agent-a"}, true),
		session("pod-y", nil, true),
	}
	scheme := runtime.NewScheme()
	if err := compactionv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var reviews atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			sar, ok := obj.(*authorizationv1.SubjectAccessReview)
			if !ok {
				return c.Create(ctx, obj, opts...)
			}
			reviews.Add(1)
			ra := sar.Spec.ResourceAttributes
			sar.Status.Allowed = sar.Spec.User == sa("editor").Username && ra.Verb == "update" && ra.Resource == "agentsessions" && ra.Namespace == ns
			return nil
		},
	}).Build()
	s := &Server{cache: c, auth: authz.New(c, compactclient.DefaultTokenAudience, 0, 0)}

	for _, tc := range []struct {
		name, session string
		user          authenticationv1.UserInfo
		// want is "" for allowed, else words the 403's message must contain.
		want []string
		// mayReview: the answer may need a SubjectAccessReview (the others come from the
		// session and the token alone).
		mayReview bool
	}{
		{"no owner, no list: any agent", "open", sa("agent-b"), nil, false},
		{"no owner, no list: a pod-bound token of another pod", "open", bound(sa("agent"), "pod-z", "uid-pod-z"), nil, false},
		{"listed", "listed", sa("agent-a"), nil, false},
		{"listed, the second", "listed", sa("agent-c"), nil, false},
		{"listed, bound to some pod", "listed", bound(sa("agent-a"), "pod-z", "uid-pod-z"), nil, false},
		{"not listed", "listed", sa("agent-b"), []string{
			"AgentSession team/listed", "spec.allowedServiceAccounts", `["agent-a" "agent-c"]`, "system:serviceaccount:team:agent-b",
			"a token not bound to a pod"}, true},
		{"not listed, bound to a pod", "listed", bound(sa("agent-b"), "pod-z", "uid-pod-z"), []string{`a token bound to pod "pod-z"`}, true},
		{"same name in another namespace", "listed", authenticationv1.UserInfo{Username: "system:serviceaccount:other:agent-a"},
			[]string{"system:serviceaccount:other:agent-a"}, true},
		{"not a ServiceAccount", "listed", authenticationv1.UserInfo{Username: "agent-a"}, []string{"agent-a sent"}, true},
		{"a username that only looks like one", "listed", authenticationv1.UserInfo{Username: "system:serviceaccount:team:agent-a:x"}, []string{"sent"}, true},
		{"an editor, not listed", "listed", sa("editor"), nil, true},
		{"pod-owned with a list: the pod's own token", "pod-x", bound(sa("agent"), "pod-x", "uid-pod-x"), nil, false},
		{"pod-owned with a list: a listed account", "pod-x", sa("agent-a"), nil, false},
		{"pod-owned with a list: another pod", "pod-x", bound(sa("agent"), "pod-z", "uid-pod-z"), []string{
			`["agent-a"]`, `the token of pod "pod-x"`}, true},
		{"pod-owned with a list: an editor", "pod-x", sa("editor"), nil, true},
		{"pod-owned, no list: the pod's own token", "pod-y", bound(sa("agent"), "pod-y", "uid-pod-y"), nil, false},
		{"pod-owned, no list: a ServiceAccount token", "pod-y", sa("agent-a"), []string{`belongs to pod "pod-y"`}, true},
		{"not found", "missing", sa("agent-b"), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reviews.Load()
			err := s.checkOwner(context.Background(), tc.user, ns, tc.session)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else {
				var ae *apiError
				if !errors.As(err, &ae) || ae.code != http.StatusForbidden || ae.reason != ReasonForbidden {
					t.Fatalf("error %v, want a 403", err)
				}
				for _, w := range tc.want {
					if !strings.Contains(ae.msg, w) {
						t.Errorf("403 message %q does not say %q", ae.msg, w)
					}
				}
			}
			if reviews.Load() > before && !tc.mayReview {
				t.Errorf("asked a SubjectAccessReview for an answer the session and the token give")
			}
		})
	}
}

func TestServiceAccountOf(t *testing.T) {
	for _, tc := range []struct {
		username, ns, name string
		ok                 bool
	}{
		{"system:serviceaccount:team:agent-a", "team", "agent-a", true},
		{"system:serviceaccount:team", "", "", false},
		{"system:serviceaccount::agent", "", "", false},
		{"system:serviceaccount:team:", "", "", false},
		{"system:serviceaccount:team:a:b", "", "", false},
		{"system:serviceaccounts:team", "", "", false},
		{"alice", "", "", false},
	} {
		ns, name, ok := serviceAccountOf(tc.username)
		if ns != tc.ns || name != tc.name || ok != tc.ok {
			t.Errorf("serviceAccountOf(%q) = %q, %q, %v; want %q, %q, %v", tc.username, ns, name, ok, tc.ns, tc.name, tc.ok)
		}
	}
}
