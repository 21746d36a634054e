package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
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

// errSessionNameTaken: an AgentSession of the pod's name exists and another object controls it.
var errSessionNameTaken = errors.New("session name taken")

// Reconcile creates or updates the annotated pod's AgentSession.
func (r *PodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := r.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Annotations[PolicyAnnotation] == "" || !pod.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	spec, err := sessionSpecFor(pod)
	if err != nil {
		r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, compactionv1alpha1.ReasonInvalidAnnotation, "CreateSession", "%v", err)
		return ctrl.Result{}, nil // fixed by editing the pod, which triggers a new reconcile
	}

	s := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
	var refused *compactionv1alpha1.PolicyReference
	op, err := controllerutil.CreateOrPatch(ctx, r.Client, s, func() error {
		if s.CreationTimestamp.IsZero() { // not found: created as the pod's
			s.Labels = map[string]string{"app.kubernetes.io/managed-by": "compaction-operator"}
			s.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(pod, corev1.SchemeGroupVersion.WithKind("Pod"))}
			s.Spec = spec
			return nil
		}
		if !metav1.IsControlledBy(s, pod) {
			return errSessionNameTaken
		}
		if s.DeletionTimestamp.IsZero() {
			s.Spec, refused = desiredSpec(spec, s.Spec)
		}
		return nil
	})
	switch {
	case errors.Is(err, errSessionNameTaken):
		r.Recorder.Eventf(pod, s, corev1.EventTypeWarning, compactionv1alpha1.ReasonSessionNameTaken, "CreateSession",
			"AgentSession %s exists and is not controlled by this pod; leaving it alone", s.Name)
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("create or update AgentSession: %w", err)
	case op == controllerutil.OperationResultCreated:
		r.Recorder.Eventf(pod, s, corev1.EventTypeNormal, compactionv1alpha1.ReasonSessionCreated, "CreateSession",
			"Created AgentSession %s with %s %s", s.Name, spec.PolicyRef.Kind, spec.PolicyRef.Name)
		r.checkProxyInjected(ctx, pod)
	case refused != nil:
		r.Recorder.Eventf(pod, s, corev1.EventTypeWarning, compactionv1alpha1.ReasonPolicyChangeRefused, "UpdateSession",
			"The pod's annotations name %s %s, its AgentSession %s uses %s %s, and a session's policy cannot change: "+
				"delete the AgentSession to start a new session with the new policy (its stored objects are deleted), or restore the annotation",
			refused.Kind, refused.Name, s.Name, s.Spec.PolicyRef.Kind, s.Spec.PolicyRef.Name)
	}
	return ctrl.Result{}, nil
}

// desiredSpec is the spec an existing session of the pod should have: want, from the pod's
// annotations, with what belongs to the session kept. Who may use it
// (spec.allowedServiceAccounts) is the session's own setting; and a session never changes
// policy (its objects stay where its policy put them; the API server refuses it): when want
// names another, the session's is kept and refused is the one the annotations name. The
// rest of the spec is still brought in line.
func desiredSpec(want, have compactionv1alpha1.AgentSessionSpec) (spec compactionv1alpha1.AgentSessionSpec, refused *compactionv1alpha1.PolicyReference) {
	want.AllowedServiceAccounts = have.AllowedServiceAccounts
	if want.PolicyRef != have.PolicyRef {
		named := want.PolicyRef
		refused, want.PolicyRef = &named, have.PolicyRef
	}
	return want, refused
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
