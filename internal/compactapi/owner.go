package compactapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/internal/compactapi/authz"
)

// checkOwner isolates the agents of one namespace from each other: the compaction-agent
// role is namespace-wide, so without it any agent could read another's tool results and
// records. A session owned by a Pod (as the pod controller creates them) may be used with a
// token bound to that pod; a session whose spec.allowedServiceAccounts is set, with a token of
// one of the ServiceAccounts it lists (for a pod-owned session, in addition to the pod's own
// token). Either way a caller allowed to update that AgentSession (the namespace's editors and
// admins, or a Role naming the session), which the compaction-agent role does not grant, may
// use it too. A session neither owned by a pod nor listing accounts is left to the RBAC check
// alone. A session that is not found passes: the lookup answers 404.
func (s *Server) checkOwner(ctx context.Context, user authenticationv1.UserInfo, namespace, name string) error {
	var obj compactionv1alpha1.AgentSession
	if err := (sharedReader{s.cache}).Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &obj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		return fmt.Errorf("get AgentSession: %w", err)
	}
	var pods []string
	for _, ref := range obj.OwnerReferences {
		if ref.APIVersion == "v1" && ref.Kind == "Pod" {
			if slices.Contains(user.Extra[authz.PodUIDExtra], string(ref.UID)) {
				return nil
			}
			pods = append(pods, ref.Name)
		}
	}
	listed := obj.Spec.AllowedServiceAccounts
	if len(pods) == 0 && len(listed) == 0 {
		return nil
	}
	if len(listed) > 0 {
		if saNamespace, sa, ok := serviceAccountOf(user.Username); ok && saNamespace == namespace && slices.Contains(listed, sa) {
			return nil
		}
	}
	ok, err := s.auth.AllowedTo(ctx, user, "update", "agentsessions", namespace, name)
	if err != nil || ok {
		return err
	}
	caller := "a token not bound to a pod"
	if p := user.Extra[authz.PodNameExtra]; len(p) > 0 {
		caller = fmt.Sprintf("a token bound to pod %q", p[0])
	}
	if len(listed) == 0 {
		return &apiError{http.StatusForbidden, ReasonForbidden, fmt.Sprintf(
			"AgentSession %s/%s belongs to pod %q: only that pod's own token (a projected ServiceAccount token, bound to the pod) may use it, "+
				"or a caller allowed to update agentsessions %q; %s sent %s",
			namespace, name, pods[0], name, user.Username, caller)}
	}
	pod := ""
	if len(pods) > 0 {
		pod = fmt.Sprintf(" (and the token of pod %q, which it belongs to)", pods[0])
	}
	return &apiError{http.StatusForbidden, ReasonForbidden, fmt.Sprintf(
		"AgentSession %s/%s may only be used by the ServiceAccounts its spec.allowedServiceAccounts lists, %q%s, "+
			"or a caller allowed to update agentsessions %q; %s sent %s",
		namespace, name, listed, pod, name, user.Username, caller)}
}

// serviceAccountOf is the namespace and name of the ServiceAccount whose token authenticated
// as username (system:serviceaccount:NAMESPACE:NAME); ok is false for any other user.
func serviceAccountOf(username string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}
