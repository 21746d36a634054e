package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
)

// Pod annotations that ask for an AgentSession.
const (
	// PolicyAnnotation names the policy the pod's agent compacts with.
	PolicyAnnotation = "compaction.harness9.io/policy"
	// PolicyKindAnnotation is CompactionPolicy (default) or ClusterCompactionPolicy.
	PolicyKindAnnotation = "compaction.harness9.io/policy-kind"
	// ContextWindowAnnotation overrides the policy's context window for this pod's session.
	ContextWindowAnnotation = "compaction.harness9.io/context-window"
)

// PodReconciler creates an AgentSession for every pod annotated with PolicyAnnotation, named
// after the pod and controlled by it, so deleting the pod deletes the session and, through
// the session's finalizer, its stored objects. It watches pod metadata only.
type PodReconciler struct {
	client.Client
	// APIReader reads a pod's spec, which the cache does not hold, once: when its session is
	// created, to say why compaction-proxy was not injected. Nil: the manager's.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/finalizers,verbs=update
// +kubebuilder:rbac:groups=compaction.harness9.io,resources=agentsessions,verbs=create

// Reconcile creates or updates the annotated pod's AgentSession.
func (r *PodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := r.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	policyName := pod.Annotations[PolicyAnnotation]
	if policyName == "" || !pod.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	spec, err := sessionSpecFor(pod)
	if err != nil {
		r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, compactionv1alpha1.ReasonInvalidAnnotation, "CreateSession", "%v", err)
		return ctrl.Result{}, nil // fixed by editing the pod, which triggers a new reconcile
	}

	var s compactionv1alpha1.AgentSession
	err = r.Get(ctx, req.NamespacedName, &s)
	switch {
	case apierrors.IsNotFound(err):
		s = compactionv1alpha1.AgentSession{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       pod.Namespace,
				Name:            pod.Name,
				Labels:          map[string]string{"app.kubernetes.io/managed-by": "compaction-operator"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pod, corev1.SchemeGroupVersion.WithKind("Pod"))},
			},
			Spec: spec,
		}
		if err := r.Create(ctx, &s); err != nil {
			return ctrl.Result{}, fmt.Errorf("create AgentSession: %w", err)
		}
		r.Recorder.Eventf(pod, &s, corev1.EventTypeNormal, compactionv1alpha1.ReasonSessionCreated, "CreateSession",
			"Created AgentSession %s with %s %s", s.Name, spec.PolicyRef.Kind, spec.PolicyRef.Name)
		r.checkProxyInjected(ctx, pod)
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get AgentSession: %w", err)
	}

	// Who may use the session (spec.allowedServiceAccounts) is the session's own setting,
	// not the pod's annotations: keep it.
	spec.AllowedServiceAccounts = s.Spec.AllowedServiceAccounts
	if !metav1.IsControlledBy(&s, pod) {
		r.Recorder.Eventf(pod, &s, corev1.EventTypeWarning, compactionv1alpha1.ReasonSessionNameTaken, "CreateSession",
			"AgentSession %s exists and is not controlled by this pod; leaving it alone", s.Name)
		return ctrl.Result{}, nil
	}
	if equality.Semantic.DeepEqual(s.Spec, spec) || !s.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if s.Spec.PolicyRef != spec.PolicyRef {
		// The session's objects stay where its policy put them: a session never changes
		// policy (the API server refuses it). The rest of the spec is still brought in line.
		r.Recorder.Eventf(pod, &s, corev1.EventTypeWarning, compactionv1alpha1.ReasonPolicyChangeRefused, "UpdateSession",
			"The pod's annotations name %s %s, its AgentSession %s uses %s %s, and a session's policy cannot change: "+
				"delete the AgentSession to start a new session with the new policy (its stored objects are deleted), or restore the annotation",
			spec.PolicyRef.Kind, spec.PolicyRef.Name, s.Name, s.Spec.PolicyRef.Kind, s.Spec.PolicyRef.Name)
		spec.PolicyRef = s.Spec.PolicyRef
		if equality.Semantic.DeepEqual(s.Spec, spec) {
			return ctrl.Result{}, nil
		}
	}
	base := s.DeepCopy()
	s.Spec = spec
	if err := r.Patch(ctx, &s, client.MergeFrom(base)); err != nil {
		return ctrl.Result{}, fmt.Errorf("update AgentSession spec: %w", err)
	}
	return ctrl.Result{}, nil
}

// checkProxyInjected records a Warning event ProxyNotInjected, with the cause, on a pod
// that asked for compaction-proxy (ProxyAnnotation) and was admitted without it: the
// injection policy cannot say so itself. It runs once per pod, when its session is created;
// a pod it cannot read gets no event.
func (r *PodReconciler) checkProxyInjected(ctx context.Context, meta *metav1.PartialObjectMetadata) {
	if meta.Annotations[ProxyAnnotation] != "true" {
		return
	}
	var pod corev1.Pod
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(meta), &pod); err != nil {
		logf.FromContext(ctx).Error(err, "read the pod to check its compaction-proxy")
		return
	}
	if proxyInjected(&pod) {
		return
	}
	r.Recorder.Eventf(meta, nil, corev1.EventTypeWarning, ReasonProxyNotInjected, "InjectProxy",
		"compaction-proxy was not injected: %s", proxyNotInjectedCause(&pod))
}

// sessionSpecFor reads the session spec from the pod's annotations.
func sessionSpecFor(pod *metav1.PartialObjectMetadata) (compactionv1alpha1.AgentSessionSpec, error) {
	a := pod.Annotations
	spec := compactionv1alpha1.AgentSessionSpec{PolicyRef: compactionv1alpha1.PolicyReference{
		Kind: compactionv1alpha1.PolicyKindNamespaced, Name: a[PolicyAnnotation],
	}}
	switch k := compactionv1alpha1.PolicyKind(a[PolicyKindAnnotation]); k {
	case "", compactionv1alpha1.PolicyKindNamespaced:
	case compactionv1alpha1.PolicyKindCluster:
		spec.PolicyRef.Kind = k
	default:
		return spec, fmt.Errorf("annotation %s: %q is neither %s nor %s", PolicyKindAnnotation, k,
			compactionv1alpha1.PolicyKindNamespaced, compactionv1alpha1.PolicyKindCluster)
	}
	if v, ok := a[ContextWindowAnnotation]; ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1024 || n > 10000000 {
			return spec, fmt.Errorf("annotation %s: %q is not a whole number of tokens from 1024 to 10000000", ContextWindowAnnotation, v)
		}
		spec.ContextWindow = int32(n)
	}
	return spec, nil
}

// SetupWithManager watches the metadata of annotated pods and the sessions they control.
func (r *PodReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	annotated := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetAnnotations()[PolicyAnnotation] != ""
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Pod{}, builder.OnlyMetadata, builder.WithPredicates(annotated)).
		Watches(&compactionv1alpha1.AgentSession{},
			handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &corev1.Pod{}, handler.OnlyControllerOwner())).
		Named("pod").
		Complete(r)
}
